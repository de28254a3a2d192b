"""Timeline traces in the Chrome trace-event format (chrome://tracing, ui.perfetto.dev).

One file per rank; `pid` is the rank, `tid` a lane (compute, comm, server). Every event is a
complete event (`"ph": "X"`, `ts` and `dur` in microseconds) with a `cat` of forward, backward,
comm, server or optimizer and `args.iter`, plus one `measure` span per timed block (`args.iter`
its first iteration, `args.iters` how many) and one `probe` span per compute probe (the
driver's, where on: `args.iter` the iteration after it). Timestamps are wall-clock
microseconds taken from a monotonic clock anchored once, so ranks on one host line up and
durations never jump.
"""
from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path

LANES = {"compute": 0, "comm": 1, "server": 2}
CATEGORIES = ("forward", "backward", "comm", "server", "optimizer", "measure", "probe")


class Tracer:
    enabled = True

    def __init__(self, rank: int):
        self.rank = rank
        self.events: list[dict] = []
        self._lock = threading.Lock()  # comm events complete on the backend's threads
        self._wall0_us = time.time() * 1e6
        self._perf0 = time.perf_counter()
        self._meta: list[dict] = []

    def now_us(self) -> float:
        return self._wall0_us + (time.perf_counter() - self._perf0) * 1e6

    def complete(self, name: str, cat: str, t0_us: float, t1_us: float, args: dict, lane: str = "compute") -> None:
        event = {
            "name": name, "cat": cat, "ph": "X", "ts": round(t0_us, 3), "dur": round(max(0.0, t1_us - t0_us), 3),
            "pid": self.rank, "tid": LANES[lane], "args": args,
        }
        with self._lock:
            self.events.append(event)

    def meta(self, name: str, args: dict) -> None:
        """A metadata event of this rank (`"ph": "M"`): where it ran, whom it talked to."""
        with self._lock:
            self._meta.append({"name": name, "ph": "M", "pid": self.rank, "args": args})

    @contextlib.contextmanager
    def span(self, name: str, cat: str, args: dict, lane: str = "compute"):
        t0 = self.now_us()
        try:
            yield
        finally:
            self.complete(name, cat, t0, self.now_us(), args, lane)

    def save(self, path: Path) -> Path:
        meta = [{"name": "process_name", "ph": "M", "pid": self.rank, "args": {"name": f"rank {self.rank}"}}]
        meta += [{"name": "thread_name", "ph": "M", "pid": self.rank, "tid": tid, "args": {"name": lane}}
                 for lane, tid in LANES.items()]
        with self._lock:
            meta += self._meta
            doc = {"traceEvents": meta + sorted(self.events, key=lambda e: e["ts"]), "displayTimeUnit": "ms"}
        tmp = Path(f"{path}.tmp{os.getpid()}")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, path)
        return path


class NullTracer:
    """Tracing off: every call is a no-op, so the measured loop pays nothing for it."""

    enabled = False

    def now_us(self) -> float:
        return 0.0

    def complete(self, *args, **kwargs) -> None:
        pass

    def span(self, *args, **kwargs):
        return contextlib.nullcontext()

    def meta(self, *args, **kwargs) -> None:
        pass


def load_meta(path, name: str) -> list[dict]:
    """The `args` of a trace file's metadata events called `name`."""
    with open(path) as f:
        return [e["args"] for e in json.load(f)["traceEvents"] if e.get("ph") == "M" and e.get("name") == name]


def load(path) -> list[dict]:
    """The complete events of a trace file (metadata events dropped)."""
    with open(path) as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
