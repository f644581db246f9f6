"""Calls through easeoff with the real openai and anthropic SDKs, their own retries
off, so every throttle or overload the upstream answers must be absorbed by easeoff.
Prints one JSON object of what the SDKs returned.

  python llm_sdks.py OPENAI_URL ANTHROPIC_URL   (easeoff with each preset)
"""

import json
import sys

import anthropic
import openai

openai_url, anthropic_url = sys.argv[1], sys.argv[2]
out = {}
user = [{"role": "user", "content": "hi"}]

oa = openai.OpenAI(base_url=openai_url + "/v1", api_key="sk-test", max_retries=0, timeout=30)
chat = oa.chat.completions.create(model="busy", messages=user, max_tokens=5)
out["chat"] = {"content": chat.choices[0].message.content, "total_tokens": chat.usage.total_tokens}

text, total = "", None
stream = oa.chat.completions.create(
    model="calm", messages=user, stream=True, stream_options={"include_usage": True}
)
for chunk in stream:
    if chunk.choices:
        text += chunk.choices[0].delta.content or ""
    if chunk.usage:
        total = chunk.usage.total_tokens
out["chat_stream"] = {"content": text, "total_tokens": total}

# A multipart upload names its model in a form field, not in JSON.
audio = bytes(range(256)) * 800
out["transcription"] = oa.audio.transcriptions.create(
    model="whisper-1", file=("a.wav", audio, "audio/wav")
).text

# A 1.5 MiB prompt, past what easeoff holds to replay; the SDK writes `model` after it.
long = [{"role": "user", "content": "x" * (3 << 19)}]
chat = oa.chat.completions.create(model="gpt-long", messages=long, max_tokens=5)
out["long_chat"] = chat.choices[0].message.content

an = anthropic.Anthropic(base_url=anthropic_url, api_key="sk-ant-test", max_retries=0, timeout=30)
message = an.messages.create(model="claude-test", max_tokens=10, messages=user)
out["message"] = {"text": message.content[0].text, "output_tokens": message.usage.output_tokens}

with an.messages.stream(model="claude-test", max_tokens=10, messages=user) as s:
    text = "".join(s.text_stream)
    final = s.get_final_message()
out["message_stream"] = {"text": text, "output_tokens": final.usage.output_tokens}

message = an.messages.create(model="claude-long", max_tokens=10, messages=long)
out["long_message"] = message.content[0].text

print(json.dumps(out))
