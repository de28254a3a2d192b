"""The timing driver in one process (a Gloo group of one): batches exist before anything is
measured, iterations pick them as `batch_index` says, and each block is one interval that holds
its iterations. (That a block also holds its communication, across workers, is shown by
tests/multiproc/test_reproduce.py.)"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist

from ddlbench import config, driver, hostcpu, methods, models
from ddlbench.models.data import batch_index
from ddlbench.trace import Tracer


def test_batch_index_reuses_one_batch_or_gives_each_iteration_of_a_repeat_its_own():
    assert [batch_index(i, 1) for i in range(5)] == [0] * 5  # the study: one batch, reused
    # local: warm-up 2 + measured 3 = 5 batches; the second repeat (iterations 5..9) cycles them again
    assert [batch_index(i, 5) for i in range(10)] == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="distinct_batches=0"):
        batch_index(3, 0)


@pytest.fixture
def group(tmp_path):
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("method", ["bsp-a2a", "bytescheduler-a2a"])
def test_batches_are_made_before_measuring_and_each_block_holds_its_iterations(group, method):
    cfg = config.resolve(config._compose([
        f"method={method}", "model=tiny-resnet", "workers=1", "local_batch=2", "profile.warmup_iters=1",
        "profile.measured_iters=3", "profile.repeats=2", "profile.distinct_batches=2"]))
    real = models.build(cfg.model, cfg.local_batch, cfg.seed)
    tracer = Tracer(0)
    made, used = [], []  # (trace time, batch index) of every batch made; the batch each forward got

    def make_batch(seed, rank, index, device):
        made.append((tracer.now_us(), index))
        return real.make_batch(seed, rank, index, device)

    def loss(model, batch):
        used.append(batch)
        return real.loss(model, batch)

    w = dataclasses.replace(real, make_batch=make_batch, loss=loss)
    ctx = methods.Context(rank=0, world=1, device=torch.device("cpu"), tracer=tracer, workload=w, seed=cfg.seed,
                          extra={"workers": 1, "servers": 0, "comm_timeout_s": 30, "optimizer": cfg.optimizer,
                                 "engine": "torch", "startup_timeout_s": 60})
    sync = methods.build(cfg.method, ctx)
    result = driver.measure(cfg, ctx, w, sync)
    sync.close()

    events = tracer.events
    first_forward = min(e["ts"] for e in events if e["cat"] == "forward")
    assert [i for _, i in made] == [0, 1] and all(t < first_forward for t, _ in made)
    batches = {}
    for it, batch in enumerate(used):  # 2 repeats x (1 + 3) iterations, cycling over the two batches
        batches.setdefault(batch_index(it, 2), batch)
        assert batch is batches[batch_index(it, 2)]
    assert len(used) == 8

    blocks = sorted((e for e in events if e["cat"] == "measure"), key=lambda e: e["ts"])
    assert [(b["args"]["iter"], b["args"]["iters"]) for b in blocks] == [(1, 3), (5, 3)]
    for b, block_time in zip(blocks, result["block_time_s"]):
        inside = [e for e in events if e["cat"] != "measure" and b["args"]["iter"] <= e["args"]["iter"] < b["args"]["iter"] + 3]
        assert {e["cat"] for e in inside} >= {"forward", "backward"}  # one worker: no communication
        assert all(b["ts"] <= e["ts"] and e["ts"] + e["dur"] <= b["ts"] + b["dur"] for e in inside)
        assert b["dur"] / 1e6 == pytest.approx(block_time, abs=1e-3)
    # the per-iteration host stamps split the block: diagnostics, never more than the block
    per_iter = result["iter_times_s"]
    assert len(per_iter) == 6 and len(result["block_time_s"]) == 2
    for r, block_time in enumerate(result["block_time_s"]):
        assert sum(per_iter[3 * r:3 * r + 3]) <= block_time
    assert result["samples_per_sec_per_repeat"] == pytest.approx([1 * 2 * 3 / t for t in result["block_time_s"]])
    assert result["cudnn_benchmark"] is False and result["tf32"]["on"] is False  # a CPU run
    assert set(result["tf32"]) == {"matmul_allow_tf32", "cudnn_allow_tf32", "NVIDIA_TF32_OVERRIDE", "on"}
    # how busy the machine's cores were in each block (coarse: /proc/stat counts 10 ms ticks)
    assert result["host_cores"] == hostcpu.cores() and len(result["host_busy_cores"]) == 2
    assert all(b >= 0 for b in result["host_busy_cores"])
    # and how much of them the hypervisor gave other guests meanwhile (0 on bare metal)
    assert len(result["host_steal_cores"]) == (2 if hostcpu.steal_s() is not None else 0)
    assert all(0 <= s <= hostcpu.cores() for s in result["host_steal_cores"])
    # where this rank's CPU went, per block, and how long its threads waited for a core
    assert len(result["thread_cpu_ms_per_iter"]) == 2
    assert all(isinstance(block, dict) and all(v >= 0.05 for v in block.values())
               for block in result["thread_cpu_ms_per_iter"])
    assert "main" in result["thread_cpu_ms_per_iter"][0]
    assert len(result["thread_runq_ms_per_iter"]) == 2
    assert all(isinstance(block, dict) and all(v >= 0.05 for v in block.values())
               for block in result["thread_runq_ms_per_iter"])


@pytest.mark.parametrize("method", ["wfbp-a2a", "bytescheduler-a2a"])
def test_the_compute_probe_times_steps_before_each_repeat_and_leaves_the_run_as_it_was(group, method):
    """profile.compute_probe_iters: before each repeat's warm-up, that many training steps on a
    private copy of the model, timed and traced apart from the blocks; the method's hooks never
    see them (they would count gradients or communicate), and the run ends with the parameters
    a run without the probe gets."""
    def run(probe_iters: int):
        cfg = config.resolve(config._compose([
            f"method={method}", "model=tiny-resnet", "workers=1", "local_batch=2", "profile.warmup_iters=1",
            "profile.measured_iters=2", "profile.repeats=2", f"profile.compute_probe_iters={probe_iters}"]))
        w = models.build(cfg.model, cfg.local_batch, cfg.seed)
        tracer = Tracer(0)
        ctx = methods.Context(rank=0, world=1, device=torch.device("cpu"), tracer=tracer, workload=w, seed=cfg.seed,
                              extra={"workers": 1, "servers": 0, "comm_timeout_s": 30, "optimizer": cfg.optimizer,
                                     "engine": "torch", "startup_timeout_s": 60})
        sync = methods.build(cfg.method, ctx)
        try:
            result = driver.measure(cfg, ctx, w, sync)
        finally:
            sync.close()
        return result, driver.fingerprint(w.model), tracer.events

    plain, plain_params, _ = run(0)
    assert "compute_probe_s" not in plain
    probed, params, events = run(3)
    assert params == pytest.approx(plain_params, rel=1e-9)
    assert len(probed["compute_probe_s"]) == 2 and len(probed["compute_probe_iter_s"]) == 6
    assert len(probed["compute_probe_lockstep_s"]) == 2 and all(t > 0 for t in probed["compute_probe_lockstep_s"])
    # one worker: its own step is the whole step
    assert probed["compute_probe_lockstep_own_s"] == probed["compute_probe_lockstep_s"]
    # then, per repeat, its step after each idle length (half as many steps, here one each)
    assert probed["compute_probe_idle_s"] == list(driver.PROBE_IDLE_S)
    for key in ("compute_probe_after_idle_s", "compute_probe_after_idle_own_s"):
        assert len(probed[key]) == 2
        assert all(len(rep) == len(driver.PROBE_IDLE_S) and all(t > 0 for t in rep) for rep in probed[key])
    # one worker: its own step is the whole step, after idle too
    assert probed["compute_probe_after_idle_own_s"] == probed["compute_probe_after_idle_s"]
    for r in range(2):  # one worker: the workers' mean step is its own
        assert probed["compute_probe_s"][r] == pytest.approx(sum(probed["compute_probe_iter_s"][3 * r:3 * r + 3]) / 3)
    assert all(t > 0 for t in probed["compute_probe_iter_s"])
    probes = sorted((e for e in events if e["cat"] == "probe"), key=lambda e: e["ts"])
    blocks = sorted((e for e in events if e["cat"] == "measure"), key=lambda e: e["ts"])
    assert [(e["args"]["repeat"], e["args"]["iter"], e["args"]["iters"]) for e in probes] == [(0, 0, 3), (1, 3, 3)]
    for probe, block in zip(probes, blocks):  # before its repeat's warm-up, and outside every block
        first = min(e["ts"] for e in events if e["cat"] == "forward" and e["args"]["iter"] == probe["args"]["iter"])
        assert probe["ts"] + probe["dur"] <= first < block["ts"]
    # the run's own iterations are the same in number: the probe's steps are none of them
    assert probed["iterations_total"] == plain["iterations_total"] == 6


def test_each_threads_cpu_is_counted_under_its_kernel_name():
    """hostcpu.thread_cpu_s: a method's helper thread (named by `start_thread`) that spins 0.3 s
    of CPU shows under its own name, apart from the main thread's; per_iteration_ms divides a
    block's by its iterations and leaves out names that used none."""
    import threading

    from ddlbench.methods.base import start_thread

    if not hostcpu.thread_cpu_s():
        pytest.skip("no /proc/self/task on this machine")
    go, spun, done = threading.Event(), threading.Event(), threading.Event()

    def spin() -> None:
        go.wait(5)
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.3:
            pass
        spun.set()
        done.wait(5)  # alive while it is read: an ended thread is no longer counted

    thread = start_thread(spin, "spinner")
    before = hostcpu.thread_cpu_s()
    go.set()
    assert spun.wait(10)
    after = hostcpu.thread_cpu_s()
    done.set()
    thread.join(5)
    ms = hostcpu.per_iteration_ms(before, after, 3)
    assert ms["ddlb-spinner"] == pytest.approx(100.0, abs=10.0)  # 0.3 s over 3
    assert "main" in before and ms.get("main", 0.0) < 100.0
    assert hostcpu.per_iteration_ms({"a": 1.0, "b": 1.0}, {"a": 1.3, "b": 1.0}, 3) == {"a": 100.0}


def test_a_threads_cpu_and_run_queue_time_read_to_the_millisecond():
    """hostcpu.thread_sched_s: the scheduler's nanosecond clocks, not /proc's 10 ms ticks (over a
    40-iteration block those read in steps of 0.25 ms an iteration, coarser than the per-message
    costs the predictor checks against them). A thread that spins 35 ms of CPU reads 35 ms (ticks
    give 30 or 40); two threads spinning at once on one core each wait about half their time for
    it (their work outside the GIL, so that they wait on the core, not on the GIL), which the
    run-queue clock shows and the CPU clock does not."""
    if not hostcpu.thread_sched_s() or not os.path.exists(f"/proc/self/task/{os.getpid()}/schedstat"):
        pytest.skip("no /proc/self/task/*/schedstat on this machine")
    script = """
import hashlib, json, os, threading, time
from ddlbench import hostcpu
from ddlbench.methods.base import start_thread
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
go = threading.Event(); done = threading.Event(); spun = []
data = bytes(1 << 16)
def spin(seconds):
    go.wait(5)
    t0 = time.thread_time()
    while time.thread_time() - t0 < seconds:
        hashlib.sha256(data).digest()  # hashes this long run without the GIL: the threads contend for the core alone
    spun.append(1)
    done.wait(10)
threads = [start_thread(spin, name, args=(s,)) for name, s in (("one", 0.035), ("two", 0.2), ("three", 0.2))]
before = hostcpu.thread_sched_s()
go.set()
while len(spun) < 3:
    time.sleep(0.01)
after = hostcpu.thread_sched_s()
done.set()
print(json.dumps({n: [after[n][i] - before.get(n, (0.0, 0.0))[i] for i in (0, 1)]
                  for n in ("ddlb-one", "ddlb-two", "ddlb-three")}))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["ddlb-one"][0] == pytest.approx(0.035, abs=0.002)
    for name in ("ddlb-two", "ddlb-three"):
        cpu, runq = got[name]
        assert cpu == pytest.approx(0.2, abs=0.005)
        assert runq > 0.05  # three spinners on one core: each waited for it


def test_the_machines_busy_cpu_counts_a_spinning_process():
    if hostcpu.busy_s() is None:
        pytest.skip("no /proc/stat on this machine")
    b0, t0 = hostcpu.busy_s(), time.process_time()
    while time.process_time() - t0 < 0.5:
        pass
    assert hostcpu.busy_s() - b0 >= 0.45  # this process's 0.5 s, and whatever else ran meanwhile


def test_progress_says_nothing_is_measured_yet_during_the_first_warm_up():
    """The first lines used to read 'nan samples/s'."""
    import io

    from omegaconf import OmegaConf

    out = io.StringIO()
    cfg = OmegaConf.create({"profile": {"warmup_iters": 1, "measured_iters": 2, "repeats": 1}})
    progress = driver.Progress("run", cfg, 8, stream=out)
    progress.update(0, 0, 0.5)   # warm-up
    progress.update(0, 1, 0.25)  # measured
    progress.update(0, 2, 0.25)
    lines = out.getvalue().splitlines()
    assert "nan" not in out.getvalue()
    assert "not measured yet" in lines[0] and "32.0 samples/s" in lines[-1]


def test_seeding_dropout_draws_as_torch_manual_seed_does():
    """data.seed_dropout seeds what dropout on the CPU draws from exactly as torch.manual_seed
    with the same stream seed (the single-process reference, tests/helpers.py, uses the latter)."""
    from ddlbench.models.data import seed_dropout, stream_seed

    torch.manual_seed(stream_seed(3, 1, 7))
    want = torch.nn.functional.dropout(torch.ones(64), 0.5)
    torch.manual_seed(0)
    seed_dropout(3, 1, 7, torch.device("cpu"))
    assert torch.equal(torch.nn.functional.dropout(torch.ones(64), 0.5), want)


def test_an_iteration_formats_no_python_stack(group, monkeypatch):
    """The driver seeds each iteration's dropout (data.seed_dropout) without torch.manual_seed,
    which queues a call with a formatted stack for every backend not initialised (CUDA, XPU,
    MPS): 0.33 ms per iteration inside a worker, time the runs paid between steps and the
    compute probe did not."""
    import traceback

    cfg = config.resolve(config._compose([
        "method=bsp-a2a", "model=tiny-resnet", "workers=1", "local_batch=2", "profile.warmup_iters=1",
        "profile.measured_iters=2", "profile.repeats=1"]))
    w = models.build(cfg.model, cfg.local_batch, cfg.seed)
    ctx = methods.Context(rank=0, world=1, device=torch.device("cpu"), tracer=Tracer(0), workload=w, seed=cfg.seed,
                          extra={"workers": 1, "servers": 0, "comm_timeout_s": 30, "optimizer": cfg.optimizer,
                                 "engine": "torch", "startup_timeout_s": 60})
    sync = methods.build(cfg.method, ctx)
    formatted = []  # from here on: building the model seeds it once with torch.manual_seed
    real = traceback.format_stack
    monkeypatch.setattr(traceback, "format_stack", lambda *a, **k: formatted.append(1) or real(*a, **k))
    try:
        driver.measure(cfg, ctx, w, sync)
    finally:
        sync.close()
    assert formatted == []


def test_a_lockstep_step_runs_from_a_machines_first_start_to_its_last_end():
    # two workers of one machine: the second waited 0.5 s for a core before it started, which its
    # own step (0.7 s, the longest) leaves out; the step is 1.2 s
    one_machine = [("boot-a", [(10.0, 11.0), (20.0, 20.4)]), ("boot-a", [(10.5, 11.2), (20.1, 20.3)])]
    whole, own = driver.lockstep_steps_s(one_machine)
    assert whole == pytest.approx([1.2, 0.4]) and own == pytest.approx([1.0, 0.4])
    # a second machine's clock reads another time: its stamps are compared among themselves only,
    # and the slowest machine's step counts
    other = [("boot-b", [(500.0, 501.5), (900.0, 900.1)])]
    whole, own = driver.lockstep_steps_s(one_machine + other)
    assert whole == pytest.approx([1.5, 0.4]) and own == pytest.approx([1.5, 0.4])
    # one worker a machine: each worker's own step, the slowest
    assert driver.lockstep_steps_s([("a", [(0.0, 1.0)]), ("b", [(7.0, 7.3)])]) == (pytest.approx([1.0]),
                                                                                 pytest.approx([1.0]))


def test_steal_is_proc_stats_ninth_field_in_seconds(tmp_path, monkeypatch):
    """hostcpu.steal_s: /proc/stat's first line, its 8th number (steal) in clock ticks, as
    seconds; None where the kernel gives no such field."""
    import builtins

    real_open = builtins.open
    stat = tmp_path / "stat"

    def fake_open(path, *a, **k):
        return real_open(stat, *a, **k) if path == "/proc/stat" else real_open(path, *a, **k)
    monkeypatch.setattr(builtins, "open", fake_open)
    stat.write_text("cpu  100 0 50 900 4 0 3 250 0 0\ncpu0 1 2 3\n")
    ticks = __import__("os").sysconf("SC_CLK_TCK")
    assert hostcpu.steal_s() == pytest.approx(250 / ticks)
    assert hostcpu.busy_s() == pytest.approx((100 + 0 + 50 + 0 + 3) / ticks)  # steal is not busy
    stat.write_text("cpu  100 0 50 900 4 0 3\n")
    assert hostcpu.steal_s() is None
