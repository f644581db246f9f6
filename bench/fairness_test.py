"""Self-test of bench/fairness.py's mock rules and its max-min arithmetic:
python3 bench/fairness_test.py"""

import json
import unittest

import fairness


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class BucketTest(unittest.TestCase):
    def test_starts_full_refills_continuously_and_says_when_a_request_fits(self):
        clock = Clock()
        b = fairness.Bucket(20, 20, now=clock)
        self.assertEqual([b.take(1) for _ in range(20)], [0.0] * 20)
        self.assertAlmostEqual(b.take(1), 0.05)
        clock.t = 0.05
        self.assertEqual(b.take(1), 0.0)
        clock.t = 100
        self.assertEqual([b.take(1) for _ in range(20)], [0.0] * 20, "one second banked")
        self.assertGreater(b.take(1), 0)


class ChargeTest(unittest.TestCase):
    def test_a_call_is_one_and_tokens_are_prompt_over_four_plus_max_tokens(self):
        body = json.dumps({"max_tokens": 100, "messages": [{"content": "x" * 401}]}).encode()
        self.assertEqual(fairness.charge(body, "requests"), 1)
        self.assertEqual(fairness.charge(body, "tokens"), 101 + 100)
        self.assertEqual(fairness.charge(b"not json", "tokens"), 1)


class MaxMinTest(unittest.TestCase):
    def test_small_demands_are_met_and_the_rest_split_evenly(self):
        fair = fairness.max_min(20, {"a": 1, "b": 2, "c": None, "d": None})
        self.assertEqual(fair, {"a": 1, "b": 2, "c": 8.5, "d": 8.5})

    def test_a_demand_above_the_split_gets_the_split(self):
        self.assertEqual(fairness.max_min(10, {"a": 6, "b": 6}), {"a": 5, "b": 5})


if __name__ == "__main__":
    unittest.main()
