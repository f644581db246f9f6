//! Config reader on arbitrary text: it must answer with a config or a list of problems,
//! never panic, and a config it accepts must render and read back.

#![no_main]

use easeoff::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let env = |name: &str| (name == "FUZZ").then(|| "1".to_string());
    if let Ok(config) = Config::parse(text, "fuzz.toml", &env) {
        let rendered = config.to_toml();
        if let Err(error) = Config::parse(&rendered, "rendered.toml", &env) {
            panic!("an accepted config renders to one that is refused: {error}\n{rendered}");
        }
    }
});
