#!/usr/bin/env python3
"""A robot's language node on SplitSpec, shaped like a ROS 2 node, in plain
Python (no rclpy needed to run it).

In ROS 2 the callbacks below would be subscriptions, on_command on a
std_msgs/String topic and on_stop on a std_msgs/Empty one, and `publish` a
publisher's publish(); with a MultiThreadedExecutor and a reentrant callback
group, on_stop runs while a generation is under way. The pattern is the same:

  - a callback must return quickly, so on_command starts the generation on a
    worker thread and streams its text from there (splitspec releases the GIL
    while generating, so the executor's threads keep running);
  - on_stop cancels from the executor's thread: client.cancel() ends the
    running generation at the next round boundary, and an event covers a
    stop that comes before the generation has started;
  - a new command preempts the one still running.

Runs against the demo models shipped in the repository:

  PYTHONPATH=build/python python3 client/python/examples/robot_node.py
  PYTHONPATH=build/python python3 client/python/examples/robot_node.py \\
      --verifier server --server 127.0.0.1:50051 --draft models/demo-draft
  PYTHONPATH=build/python python3 client/python/examples/robot_node.py \\
      --verifier server --drafter none --tokenizer models/demo-target
"""

import argparse
import os
import sys
import threading
import time
from dataclasses import dataclass

import splitspec


@dataclass
class String:  # std_msgs/String
    data: str


@dataclass
class Empty:  # std_msgs/Empty
    pass


class LanguageNode:
    def __init__(self, options, request, publish, publish_done):
        self._client = splitspec.Client(options)  # loads the models: once, at start-up
        self.request = request  # a node parameter in ROS 2
        self._publish = publish  # each text piece, as it becomes final
        self._publish_done = publish_done  # the Result at the end
        self._worker = None
        self._stop = threading.Event()

    def on_command(self, msg):
        self.on_stop(Empty())  # a new command replaces the one running
        self._stop.clear()
        self._worker = threading.Thread(target=self._generate, args=(msg.data,), daemon=True)
        self._worker.start()

    def on_stop(self, msg):
        worker = self._worker
        if worker is None or not worker.is_alive():
            return
        self._stop.set()
        self._client.cancel()
        worker.join()

    def wait(self):
        if self._worker is not None:
            self._worker.join()

    def _generate(self, prompt):
        try:
            with self._client.stream(prompt, self.request) as stream:
                for piece in stream:
                    if self._stop.is_set():
                        break  # leaving the with block cancels it
                    self._publish(piece)
            self._publish_done(prompt, stream.result)
        except splitspec.Error as e:  # unreachable server, deadline, ...
            print(f"generation failed: {e}", file=sys.stderr)


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
    p = argparse.ArgumentParser(description="A ROS 2-shaped language node on SplitSpec: streams a generation per "
                                "command, cancels it on stop. Plays two commands, the second stopped early.")
    p.add_argument("--verifier", default="local", choices=["local", "server"])
    p.add_argument("--drafter", default="model")
    p.add_argument("--server", default="127.0.0.1:50051", help="server verifier: HOST:PORT")
    p.add_argument("--target", default=os.path.join(root, "models", "demo-target"), help="local verifier: target")
    p.add_argument("--draft", default=os.path.join(root, "models", "demo-draft"), help="draft model")
    p.add_argument("--tokenizer", default="",
                   help="the target's tokenizer (a model directory, tokenizer file or .gguf), for a drafter with "
                        "no draft model (none, lut, pld); default: the draft's")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--stop-after", type=float, default=0.02,
                   help="seconds after the second command that on_stop arrives")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()

    options = splitspec.ClientOptions(verifier=a.verifier, drafter=a.drafter, draft_dir=a.draft,
                                      threads=a.threads)
    if a.tokenizer:
        options.tokenizer = a.tokenizer
    if a.verifier == "local":
        options.target_dir = a.target
    else:
        options.server = a.server
    request = splitspec.Request(max_new_tokens=a.max_new_tokens, temperature=0.8, top_k=40, seed=1)

    def publish(piece):
        print(piece, end="", flush=True)

    def publish_done(prompt, result):
        print(f"\n[{prompt!r}: {result.finish_reason}, {len(result.ids)} tokens, "
              f"{result.stats.ms_per_token:.2f} ms/token]", flush=True)

    node = LanguageNode(options, request, publish, publish_done)
    print("> command: Turn left at the", flush=True)
    node.on_command(String("Turn left at the"))
    node.wait()
    # A long one, stopped by the operator: within what a server grants a
    # generation (max_new_tokens, 4096 by default), so it is never refused.
    node.request = splitspec.Request(max_new_tokens=2048, ignore_eos=True, temperature=0.8, top_k=40, seed=2)
    print("> command: The robot picked up", flush=True)
    node.on_command(String("The robot picked up"))
    time.sleep(a.stop_after)
    print("\n> stop", flush=True)
    node.on_stop(Empty())


if __name__ == "__main__":
    main()
