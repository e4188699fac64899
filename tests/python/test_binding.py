"""The Python module against the C++ API: the same requests give the same
tokens and text as `splitspec generate` (which calls client.h), and the
binding's own parts (streams, callbacks, cancel, errors, GIL) behave.

Run by ctest (tests/CMakeLists.txt) as
  PYTHONPATH=build/python SPLITSPEC_SOURCE_DIR=. SPLITSPEC_BIN_DIR=build/bin \
      python3 -m unittest discover -s tests/python
The demo models are tiny (a generation takes milliseconds), so cancellations
are checked against generations that would otherwise run to the context's
end, ~500 tokens.
"""

import datetime
import json
import os
import subprocess
import threading
import time
import unittest

import splitspec

SOURCE_DIR = os.environ.get("SPLITSPEC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN_DIR = os.environ.get("SPLITSPEC_BIN_DIR", os.path.join(SOURCE_DIR, "build", "bin"))
TARGET = os.path.join(SOURCE_DIR, "models", "demo-target")
DRAFT = os.path.join(SOURCE_DIR, "models", "demo-draft")
PROMPT_IDS = [1, 450, 6673, 310]
PROMPT = "Turn left at the"


def local_options(**kw):
    # threads=1: ctest runs two tests at a time on two cores.
    return splitspec.ClientOptions(verifier="local", drafter="model", target_dir=TARGET, draft_dir=DRAFT, threads=1,
                                   **kw)


def cli_generate(*args):
    """`splitspec generate --json` with the local verifier and model drafter."""
    cmd = [os.path.join(BIN_DIR, "splitspec"), "generate", "--verifier", "local", "--drafter", "model", "--target",
           TARGET, "--draft", DRAFT, "--threads", "1", "--json", *args]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def long_request():
    # Would run to the context's end (~500 tokens) unless cancelled.
    return splitspec.Request(max_new_tokens=100000, ignore_eos=True)


class SameAsCli(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.client = splitspec.Client(local_options())

    def test_greedy_ids(self):
        r = self.client.generate_ids(PROMPT_IDS, splitspec.Request(max_new_tokens=24))
        cli = cli_generate("--prompt-ids", ",".join(map(str, PROMPT_IDS)), "--max-new-tokens", "24")
        self.assertEqual(r.ids, cli["output_ids"])
        self.assertEqual(r.prompt_ids, PROMPT_IDS)
        self.assertEqual(r.finish_reason, cli["finish_reason"])
        self.assertEqual(r.stats.new_tokens, 24)
        self.assertEqual(r.stats.rounds, cli["stats"]["rounds"])
        # The CLI prints the parts its mode measures, by the same names; and
        # two generations sum.
        self.assertLessEqual(set(cli["stats"]) - {"threads", "kv_cache"}, set(r.stats.as_dict()))
        total = splitspec.Stats()
        total += r.stats
        total += r.stats
        self.assertEqual(total.new_tokens, 48)
        self.assertAlmostEqual(total.tau, r.stats.tau)

    def test_seeded_sampling_ids(self):
        req = splitspec.Request(max_new_tokens=32, temperature=0.8, seed=7)
        r = self.client.generate_ids(PROMPT_IDS, req)
        cli = cli_generate("--prompt-ids", ",".join(map(str, PROMPT_IDS)), "--max-new-tokens", "32",
                           "--temperature", "0.8", "--seed", "7")
        self.assertEqual(r.ids, cli["output_ids"])

    def test_text_prompt(self):
        r = self.client.generate(PROMPT, splitspec.Request(max_new_tokens=24, temperature=0.8, seed=7))
        cli = cli_generate("--prompt", PROMPT, "--max-new-tokens", "24", "--temperature", "0.8", "--seed", "7")
        self.assertEqual(r.prompt_ids, cli["prompt_ids"])
        self.assertEqual(r.ids, cli["output_ids"])
        self.assertEqual(r.text, cli["text"])
        self.assertTrue(r.text)


class Streaming(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.client = splitspec.Client(local_options())

    def test_stream_yields_generate_text(self):
        req = splitspec.Request(max_new_tokens=40, temperature=0.8, seed=3)
        whole = self.client.generate(PROMPT, req)
        stream = self.client.stream(PROMPT, req)
        self.assertIsNone(stream.result)
        pieces = list(stream)
        self.assertGreater(len(pieces), 1)
        self.assertEqual("".join(pieces), whole.text)
        self.assertEqual(stream.result.ids, whole.ids)
        self.assertEqual(stream.result.finish_reason, whole.finish_reason)

    def test_stream_ids_yields_generate_ids(self):
        req = splitspec.Request(max_new_tokens=40)
        whole = self.client.generate_ids(PROMPT_IDS, req)
        self.assertEqual(list(self.client.stream_ids(PROMPT_IDS, req)), whole.ids)

    def test_callbacks_see_what_is_returned(self):
        req = splitspec.Request(max_new_tokens=30)
        pieces, ids = [], []
        r = self.client.generate(PROMPT, req, pieces.append)
        self.assertEqual("".join(pieces), r.text)
        r2 = self.client.generate_ids(PROMPT_IDS, req, on_token=ids.append)
        self.assertEqual(ids, r2.ids)

    def test_callback_returning_false_stops(self):
        seen = []

        def first_three(token):
            seen.append(token)
            return len(seen) < 3

        r = self.client.generate_ids(PROMPT_IDS, long_request(), first_three)
        self.assertEqual(r.finish_reason, "cancelled")
        self.assertEqual(len(seen), 3)
        self.assertLess(len(r.ids), 100)

    def test_callback_exception_is_raised_and_client_stays_usable(self):
        def boom(piece):
            raise ValueError("from the callback")

        with self.assertRaisesRegex(ValueError, "from the callback"):
            self.client.generate(PROMPT, long_request(), boom)
        self.assertEqual(len(self.client.generate_ids(PROMPT_IDS, splitspec.Request(max_new_tokens=5)).ids), 5)

    def test_dropping_a_stream_early_cancels_it(self):
        stream = self.client.stream_ids(PROMPT_IDS, long_request())
        first = [next(stream) for _ in range(3)]
        self.assertEqual(len(first), 3)
        stream.close()
        self.assertEqual(stream.result.finish_reason, "cancelled")
        self.assertLess(len(stream.result.ids), 400)
        self.assertEqual(list(stream), [])
        # A `break` drops the iterator; the client is free again at once.
        for _ in self.client.stream(PROMPT, long_request()):
            break
        self.assertEqual(len(self.client.generate_ids(PROMPT_IDS, splitspec.Request(max_new_tokens=5)).ids), 5)

    def test_one_generation_at_a_time(self):
        with self.client.stream_ids(PROMPT_IDS, long_request()) as stream:
            next(stream)
            with self.assertRaisesRegex(splitspec.Error, "already running a generation"):
                self.client.generate_ids(PROMPT_IDS, splitspec.Request(max_new_tokens=5))
        self.assertEqual(stream.result.finish_reason, "cancelled")


class Cancel(unittest.TestCase):
    # A fresh client each: a cancel must not reach another test's generation.
    def test_cancel_from_another_thread_ends_generate(self):
        client = splitspec.Client(local_options())
        started = threading.Event()
        done = threading.Event()

        def canceller():
            started.wait(10)
            client.cancel()
            done.set()

        t = threading.Thread(target=canceller)
        t.start()
        r = client.generate_ids(PROMPT_IDS, long_request(), lambda token: started.set())
        t.join()
        self.assertTrue(done.is_set())
        self.assertEqual(r.finish_reason, "cancelled")
        self.assertLess(len(r.ids), 400)

    def test_generate_releases_the_gil(self):
        # generate() without a callback runs in a worker thread; this thread
        # keeps running Python meanwhile and cancels it. Held, the GIL would
        # keep it waiting until the ~500 tokens were done.
        client = splitspec.Client(local_options())
        out = []
        worker = threading.Thread(target=lambda: out.append(client.generate_ids(PROMPT_IDS, long_request())))
        worker.start()
        ticks = 0
        while worker.is_alive():
            ticks += 1
            client.cancel()  # lost if it comes before the generation starts, so repeated
            time.sleep(0.002)
        worker.join()
        self.assertGreater(ticks, 0)
        self.assertEqual(out[0].finish_reason, "cancelled")
        self.assertLess(len(out[0].ids), 400)

    def test_cancel_ends_a_stream(self):
        client = splitspec.Client(local_options())
        stream = client.stream(PROMPT, long_request())
        next(stream)
        threading.Thread(target=client.cancel).start()
        rest = list(stream)
        self.assertEqual(stream.result.finish_reason, "cancelled")
        self.assertLess(len(stream.result.ids), 400)
        self.assertIsInstance(rest, list)


class Errors(unittest.TestCase):
    def test_error_is_a_runtime_error(self):
        self.assertTrue(issubclass(splitspec.Error, RuntimeError))

    def test_bad_target_dir_raises_the_cpp_message(self):
        missing = os.path.join(SOURCE_DIR, "models", "no-such-model")
        with self.assertRaises(splitspec.Error) as caught:
            splitspec.Client(splitspec.ClientOptions(verifier="local", drafter="none", target_dir=missing, threads=1))
        # The CLI prints the C++ message as "error: <message>".
        cli = subprocess.run([os.path.join(BIN_DIR, "splitspec"), "generate", "--verifier", "local", "--drafter",
                              "none", "--target", missing, "--prompt-ids", "1", "--threads", "1"],
                             capture_output=True, text=True)
        self.assertNotEqual(cli.returncode, 0)
        self.assertIn(str(caught.exception), cli.stderr)
        self.assertIn("no-such-model", str(caught.exception))

    def test_bad_names_raise(self):
        with self.assertRaisesRegex(splitspec.Error, "verifier"):
            splitspec.ClientOptions(verifier="cloud")
        with self.assertRaises(splitspec.Error):
            splitspec.ClientOptions(mode="warp-speed")
        with self.assertRaises(AttributeError):
            splitspec.Request(max_tokens=3)


class Values(unittest.TestCase):
    def test_defaults_match_client_h(self):
        o = splitspec.ClientOptions()
        self.assertEqual(o.verifier, "server")
        self.assertEqual(o.drafter, "model")
        self.assertIsNone(o.mode)
        self.assertEqual(o.connect_timeout, datetime.timedelta(seconds=5))
        self.assertEqual(o.reconnect_budget, datetime.timedelta(seconds=10))
        self.assertEqual(o.failback_interval, datetime.timedelta(milliseconds=500))
        r = splitspec.Request()
        self.assertEqual((r.max_new_tokens, r.temperature, r.gamma), (128, 0.0, 4))
        self.assertEqual(r.deadline, datetime.timedelta(seconds=120))
        self.assertEqual(r.round_timeout, datetime.timedelta(0))

    def test_durations_take_timedelta_or_seconds(self):
        r = splitspec.Request(round_timeout=datetime.timedelta(milliseconds=250), deadline=1.5)
        self.assertEqual(r.round_timeout, datetime.timedelta(milliseconds=250))
        self.assertEqual(r.deadline, datetime.timedelta(milliseconds=1500))

    def test_modes(self):
        o = splitspec.with_mode(splitspec.ClientOptions(), "edge-fsd")
        self.assertEqual((o.verifier, o.drafter, o.predraft), ("server", "model", True))
        self.assertEqual(splitspec.mode_name(o), "edge-fsd")
        o = splitspec.ClientOptions(mode="local-tree")
        self.assertEqual(o.mode, "local-tree")
        o.drafter_options = {"tables": "lut.safetensors"}
        self.assertEqual(o.drafter_options, {"tables": "lut.safetensors"})
        self.assertIn("drafter_options={'tables': 'lut.safetensors'}", repr(o))

    def test_repr_hides_the_token(self):
        o = splitspec.ClientOptions(auth_token="robot-7f3a")
        self.assertNotIn("robot-7f3a", repr(o))
        self.assertIn("auth_token='<hidden>'", repr(o))
        self.assertEqual(o.auth_token, "robot-7f3a")
        self.assertIn("auth_token=''", repr(splitspec.ClientOptions()))

    def test_as_dict(self):
        client = splitspec.Client(local_options())
        d = client.generate_ids(PROMPT_IDS, splitspec.Request(max_new_tokens=8)).as_dict()
        self.assertEqual(len(d["ids"]), 8)
        self.assertEqual(d["stats"]["new_tokens"], 8)


if __name__ == "__main__":
    unittest.main()
