"""commbench's input checks, recommendation and table, without starting processes."""
import re

import pytest

from ddlbench.commbench import report
from ddlbench.commbench.cli import BadInput, parse


@pytest.mark.parametrize(
    "args, words",
    [
        (["--backends", "carrier-pigeon"], ["'carrier-pigeon'", "gloo", "mpi4py"]),
        (["--dtypes", "fp8"], ["'fp8'", "fp32, fp16, bf16"]),
        (["--collectives", "alltoall"], ["'alltoall'", "all_reduce"]),
        (["--max-bytes", "0"], ["max-bytes='0'", "> 0"]),
        (["--min-bytes", "-4"], ["min-bytes='-4'"]),
        (["--max-bytes", "lots"], ["'lots'", "256MiB"]),
        (["--backends", "nccl"], ["nccl", "CUDA"]),
        (["--devices", "cuda"], ["cuda", "no CUDA GPU"]),
        (["--workers", "1"], ["workers", "N >= 2"]),
        (["--link", "fast"], ["'fast'", "link"]),
        (["--link", "1gbit", "--backends", "mpi4py"], ["mpi4py", "--link=1gbit", "accepted: gloo"]),
        (["--link", "1gbit", "--backends", "horovod"], ["horovod", "--link=1gbit", "accepted: gloo"]),
        (["--link", "none"], ["link='none'", "accepted: a tc rate"]),
        (["--slurm"], ["--slurm needs --partition", "PARTITION="]),
        (["--slurm", "--partition", "p", "--link", "1gbit"], ["--link=1gbit", "accepted: --slurm"]),
        (["--slurm", "--partition", "p", "--time-min", "0"], ["--time-min=0", "minutes >= 1"]),
        (["--slurm", "--partition", "p", "--backends", "mpi4py"], ["mpi4py", "--slurm", "accepted: gloo"]),
        (["--slurm", "--partition", "p", "--sbatch", "=x"], ["--sbatch '=x'", "KEY=VALUE"]),
        (["--partition", "p"], ["for --slurm", "accepted: add --slurm"]),
        (["--time-min", "5"], ["for --slurm", "accepted: add --slurm"]),
        (["--mode", "fusion", "--fusion-models", "foo"], ["fusion model 'foo'", "resnet50", "tiny-resnet"]),
        (["--fusion-iters", "0"], ["fusion-iters=0", ">= 1"]),
        (["--fusion-pace-ms", "-1"], ["fusion-pace-ms=-1", "0 <= ms < 1000"]),
        (["--after-compute-ms", "-1"], ["after-compute-ms=-1", "0 <= ms < 1000"]),
        (["--timeout", "-5"], ["timeout=-5", "seconds > 0"]),
        (["--seconds-per-size", "-1"], ["seconds-per-size=-1", "seconds >= 0"]),
        (["--gloo-loop-policy", "low"], ["gloo-loop-policy='low'", "accepted: idle, none, auto"]),
        (["--pin-ranks", "maybe"], ["pin-ranks='maybe'", "accepted: auto, yes, no"]),
        (["--slurm", "--partition", "p", "--pool"], ["--pool with --slurm", "accepted: --pool on this host"]),
    ],
)
def test_bad_input_is_a_clear_error(args, words):
    import torch

    if torch.cuda.is_available() and ("nccl" in args or "cuda" in args):
        pytest.skip("GPUs are visible here: NCCL and cuda are valid")
    with pytest.raises(BadInput) as err:
        parse(args)
    for w in words:
        assert w in str(err.value)


def test_sizes_and_worker_counts_parse():
    a = parse(["--workers", "4", "--max-bytes", "1MiB", "--min-bytes", "1K", "--backends", "gloo"])
    assert a.workers == [2, 3, 4] and a.min_bytes == 1024 and a.max_bytes == 1 << 20
    assert a.backends == [("gloo", "cpu", None)]


def test_an_unavailable_backend_falls_back_to_gloo_and_says_so(capsys):
    a = parse(["--backends", "ucc"])  # this torch has no UCC
    assert a.backends == [("gloo", "cpu", "ucc")]
    assert "ucc unavailable" in capsys.readouterr().err


def row(backend, nbytes, t, wrong=0, workers=2):
    return dict(backend=backend, collective="all_reduce", dtype="fp32", device="cpu", workers=workers, bytes=nbytes,
                time_us=t, time_us_p50=t, algbw_GBps=1.0, busbw_GBps=1.0, wrong=wrong, mode="sizes")


def test_recommendation_merges_sizes_and_never_picks_a_wrong_answer():
    rows = [row("gloo", 4, 10), row("mpi4py", 4, 5), row("gloo", 16, 11), row("mpi4py", 16, 6),
            row("gloo", 64, 20), row("mpi4py", 64, 30), row("gloo", 256, 40), row("mpi4py", 256, 1, wrong=3)]
    assert report.recommend(rows) == {"all_reduce fp32 cpu x2": "mpi4py for 4 B..16 B; gloo for 64 B..256 B"}
    text = report.render(rows)
    assert "| mpi4py  | 256" in text and "all_reduce, fp32, cpu, 2 workers" in text


def test_a_slow_size_gets_the_calls_that_fit_its_time_and_a_fast_one_all_of_them():
    """100 timed calls of 5.8 s (a 64 MiB all-reduce at 100 Mbit/s) made one job of make
    commbench LINK=100mbit outlast its 30-minute timeout."""
    from ddlbench.commbench.worker import MIN_ITERS, calls_for

    spec = {"warmup": 5, "iters": 100, "budget_s": 2.0}
    assert calls_for(0.0005, **spec, done=2) == (3, 100)  # fast: every call asked for
    assert calls_for(0.05, **spec, done=2) == (3, 40)     # 40 calls fill 2 s; warm-ups fit in 0.5 s
    assert calls_for(0.2, **spec, done=2) == (2, 10)
    assert calls_for(5.8, **spec, done=2) == (0, MIN_ITERS)  # however slow, a few to average
    assert calls_for(5.8, **{**spec, "iters": 1}, done=2) == (0, 1)  # never more than asked
    assert calls_for(5.8, **{**spec, "budget_s": 0}, done=2) == (3, 100)  # 0: as asked


def test_a_round_whose_cpu_is_recorded_runs_till_its_rounds_fill_the_cpu_window(monkeypatch):
    """commbench.worker.cpu_window_calls: rank 0 times one more round and every rank makes as
    many as fill the window (/proc/stat counts 10 ms ticks: 10 rounds of 0.7 ms read 1 or 2),
    never fewer than asked, at most `most`; the other ranks follow rank 0's count (`share`)."""
    from ddlbench.commbench import worker

    clock = iter([10.0, 10.004])  # the timed round: 4 ms
    monkeypatch.setattr(worker.time, "perf_counter", lambda: next(clock))
    made = []
    shared = []

    def share(n):
        shared.append(n)
        return n + 0  # one rank: the sum is its own

    assert worker.cpu_window_calls(lambda: made.append(1), share, True, 10, window_s=1.0) == 250
    assert made == [1] and shared == [250]
    clock = iter([0.0, 0.5])
    assert worker.cpu_window_calls(lambda: None, share, True, 10, window_s=1.0) == 10  # slow rounds: as asked
    clock = iter([0.0, 1e-6])
    assert worker.cpu_window_calls(lambda: None, share, True, 10, window_s=1.0, most=5000) == 5000
    clock = iter([0.0, 0.004])
    assert worker.cpu_window_calls(lambda: None, lambda n: n + 250, False, 10) == 250  # rank 0's plan
    assert worker.CPU_WINDOW_S == 1.0


def test_rounds_planned_from_one_slow_round_are_topped_up_till_the_window_is_full(monkeypatch):
    """commbench.worker.calls_filling_window: the planned calls, then more, planned on rank 0
    from the mean so far, till the window has passed; every rank follows rank 0's counts. The
    CI box once planned from one round 3 x slower than the rest and filled 0.15 s under half."""
    from ddlbench.commbench import worker

    now = [0.0]
    monkeypatch.setattr(worker.time, "perf_counter", lambda: now[0])

    def call():
        now[0] += 0.001  # the rounds take 1 ms; the plan thought 3 ms: 50 for 0.15 s

    shared = []

    def share(n):
        shared.append(n)
        return n

    made = worker.calls_filling_window(call, share, True, 50, 0.15, since=0.0)
    assert now[0] >= 0.15 and made == 150 and shared[-1] == 0  # 50, then 100 more, then none
    now[0] = 0.0
    assert worker.calls_filling_window(call, share, True, 50, 0.0, since=0.0) == 50 and now[0] == pytest.approx(0.05)  # no window
    now[0] = 0.0
    assert worker.calls_filling_window(call, share, True, 50, 0.15, since=0.0, most=80) == 80  # at most `most`
    now[0] = 0.0
    rank1 = iter([30, 0])  # rank 0's plans, which another rank only follows
    assert worker.calls_filling_window(call, lambda n: n + next(rank1), False, 50, 0.15, since=0.0) == 80


def test_timed_calls_cover_the_whole_loop_one_time_per_call(monkeypatch):
    """Each call's time runs from the previous call's completion to its own: one time per call,
    none shorter than the call, and together exactly the loop's span (nccl-tests' block mean).
    On a fake clock that only the calls advance (the real one made this test fail beside the
    multiprocess tests: a scheduler slice outside the loop)."""
    import torch

    from ddlbench.commbench import worker

    now = [100.0]
    monkeypatch.setattr(worker.time, "perf_counter", lambda: now[0])

    class Sleepy:
        device = torch.device("cpu")
        calls = 0

        def run(self, coll, inp, out):
            self.calls += 1
            now[0] += 0.002 * self.calls  # call k takes k x 2 ms

    be = Sleepy()
    times = worker.timed_calls(be, None, None, None, 5)
    assert be.calls == 5 and times == pytest.approx([0.002 * k for k in range(1, 6)])
    assert sum(times) == pytest.approx(now[0] - 100.0)  # the whole loop, nothing dropped or counted twice

def test_across_emulated_hosts_auto_means_the_backends_torchrun_starts():
    a = parse(["--link", "1gbit"])
    assert a.backends and {b for b, _, _ in a.backends} <= {"gloo", "nccl", "mpi", "ucc"}


def test_slurm_needs_slurms_client_commands(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    with pytest.raises(BadInput, match="no sbatch on PATH; accepted: a host with Slurm's client commands"):
        parse(["--slurm", "--partition", "p", "--backends", "gloo"])


def test_on_slurm_the_gpus_are_the_nodes_not_this_hosts():
    """A login node without GPUs submits a cuda sweep for the nodes; here it is an error."""
    import argparse

    import torch

    from ddlbench.commbench.cli import resolve_backends

    if torch.cuda.is_available():
        pytest.skip("GPUs are visible here")
    a = argparse.Namespace(backends="gloo", devices=["cuda"], slurm=True)
    assert resolve_backends(a) == [("gloo", "cuda", None)]
    with pytest.raises(BadInput, match="no CUDA GPU is visible"):
        resolve_backends(argparse.Namespace(backends="gloo", devices=["cuda"], slurm=False))


def test_make_commbench_on_slurm_passes_the_partition():
    import subprocess

    from helpers import REPO

    out = subprocess.run(["make", "-n", "commbench", "CLUSTER=slurm", "PARTITION=gpu", "-o", ".venv/.installed"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--slurm --partition gpu" in out.stdout
    out = subprocess.run(["make", "-n", "commbench", "CLUSTER=slurm", "PARTITION=gpu", "TIME_MIN=5",
                          "SBATCH=account=p qos=q", "-o", ".venv/.installed"], cwd=REPO, capture_output=True, text=True,
                         timeout=60)
    assert "--time-min 5 --sbatch account=p --sbatch qos=q" in " ".join(out.stdout.split())


def test_pooled_rows_are_every_session_measured_in_the_same_place(tmp_path, monkeypatch):
    """--pool fits the network from every record under --results measured where this session's
    were: the same emulated link, or this host (files named after another host, another link's
    records and a Slurm job's are left out); a session with records of several places pools none."""
    import subprocess

    from helpers import REPO

    from ddlbench import record
    from ddlbench.commbench.cli import placement, pooled_rows

    def rows(started, net=None, n=2):
        return [{"started_at": started, "mode": "sizes", "workers": 2, "bytes": 4 << k,
                 **({"network": net} if net else {})} for k in range(n)]
    one_gbit = {"emulated": True, "link": "1gbit", "hosts": ["ddlb-node0", "ddlb-node1"]}
    earlier = rows("t0", one_gbit) + rows("t0", {**one_gbit, "link": "100mbit"})
    record.write_rows(tmp_path, earlier)
    record.write_rows(tmp_path, rows("t1"))  # this host, no emulated hosts
    record.write_rows(tmp_path, rows("t2", {"slurm_job": 7}))
    monkeypatch.setattr(record, "host_tag", lambda: "elsewhere")
    record.write_rows(tmp_path, rows("t3"))  # another host's local records
    monkeypatch.undo()
    new = rows("t4", one_gbit, 3)
    record.write_rows(tmp_path, new)
    folder = record.records_dir(tmp_path)
    got = pooled_rows(folder, new)
    assert sorted((r["started_at"], r["bytes"]) for r in got) == [("t0", 4), ("t0", 8), ("t4", 4), ("t4", 8), ("t4", 16)]
    local = rows("t5")
    record.write_rows(tmp_path, local)
    assert sorted(r["started_at"] for r in pooled_rows(folder, local)) == ["t1", "t1", "t5", "t5"]
    assert pooled_rows(folder, new + local) == new + local  # two places at once: nothing pooled
    assert placement({"network": {"slurm_job": 7}}) is None and placement({}) == ("local",)
    out = subprocess.run(["make", "-n", "commbench", "LINK=1gbit", "CB_POOL=1", "-o", ".venv/.installed"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--link 1gbit --pool" in " ".join(out.stdout.split())


def test_slurm_sweep_whose_queue_cannot_be_read_returns_what_is_done_so_far(tmp_path, monkeypatch):
    """squeue failing while the job runs: the measurements node 0 finished come back, with why the
    rest may still come (StillRunning), not as if they were the whole sweep."""
    import json
    import types

    from ddlbench.commbench import slurm
    from ddlbench.launch import slurm as launch_slurm

    class Executor:
        def submit(self, *args):
            return types.SimpleNamespace(job_id="77")

    def follow(job_id, prefix):
        raise launch_slurm.QueueUnreadable("squeue -j 77 failed 5 times (Socket timed out)")

    monkeypatch.setattr(slurm, "executor", lambda *a, **k: Executor())
    monkeypatch.setattr(launch_slurm, "follow", follow)
    done = [{"mode": "sizes", "workers": 2, "bytes": 4, "time_us": 9.0}]
    slurm.done_path(tmp_path, 0).write_text(json.dumps({"rc": 0, "rows": done}))
    jobs = [{"procs": 2}, {"procs": 3}]
    with pytest.raises(slurm.StillRunning, match=r"Slurm job 77 with 1 of 2 measurements done: squeue .*Socket timed "
                                                 r"out\); node 0 records the rest") as info:
        slurm.submit_and_collect(tmp_path, jobs, "p", 5, False, 60, {"results": str(tmp_path), "base": {}})
    assert info.value.rows == done


def test_a_signal_while_following_a_slurm_sweep_ends_commbench_as_locally(tmp_path, monkeypatch):
    """SIGTERM while following the job: it is cancelled (follow's scancel), the measurements node 0
    finished stay, the rest get an error record saying why, and the signal goes on to commbench's
    main (exit 128 + signal, no network fitted from part of the sweep). It used to be swallowed:
    'interrupted (Ctrl-C)' records, then a network config from the partial sweep and exit 1."""
    import json
    import signal
    import types

    from ddlbench.analysis.records import load
    from ddlbench.commbench import slurm
    from ddlbench.launch import local
    from ddlbench.launch import slurm as launch_slurm

    class Executor:
        def submit(self, *args):
            return types.SimpleNamespace(job_id="77")

    def follow(job_id, prefix):
        raise local.Terminated(signal.SIGTERM)

    monkeypatch.setattr(slurm, "executor", lambda *a, **k: Executor())
    monkeypatch.setattr(launch_slurm, "follow", follow)
    slurm.done_path(tmp_path, 0).write_text(json.dumps({"rc": 0, "rows": [{"bytes": 4}]}))
    jobs = [{"procs": 2, "mode": "sizes", "backend": "gloo", "fallback_from": None},
            {"procs": 3, "mode": "ps", "backend": "gloo", "fallback_from": None}]
    with pytest.raises(local.Terminated):
        slurm.submit_and_collect(tmp_path, jobs, "p", 5, False, 60, {"results": str(tmp_path), "base": {}})
    (rec,) = load([tmp_path], check=False).records
    assert rec["mode"] == "ps" and rec["error"].startswith("stopped by SIGTERM; Slurm job 77 cancelled")


def test_a_slurm_node_0_cancelled_mid_measurement_keeps_what_it_finished(tmp_path, monkeypatch):
    """scancel during a measurement: node 0 records the sizes rank 0 had written (and an error
    saying the job was cancelled) and tells the submitter it is done, before it stops."""
    import json
    import signal

    from ddlbench.analysis.records import load
    from ddlbench.commbench import cli, slurm
    from ddlbench.launch import local

    spec = tmp_path / "spec-0.json"
    spec.write_text(json.dumps({"out": str(tmp_path / "rows-0.jsonl")}))

    def cancelled(*args, **kwargs):
        (tmp_path / "rows-0.jsonl").write_text('{"bytes": 4, "time_us": 9.0}\n{"bytes": 16, "ti')
        raise local.Terminated(signal.SIGTERM)

    monkeypatch.setattr(cli, "run_jobs", cancelled)
    job = {"procs": 2, "spec": str(spec), "mode": "sizes", "backend": "gloo", "fallback_from": None, "workers": 2}
    with pytest.raises(local.Terminated):
        slurm.run_node(tmp_path, 0, ["h0", "h1"], "77", [job], 60, {"results": str(tmp_path / "results"), "base": {},
                                                                    "partition": "p"})
    kept, error = load([tmp_path / "results"], check=False).records
    assert kept["bytes"] == 4 and error["error"] == "Slurm job 77 cancelled during this measurement"
    assert json.loads(slurm.done_path(tmp_path, 0).read_text())["rc"] == 1


def test_commbench_writes_no_network_from_a_sweep_still_running(tmp_path, monkeypatch, capsys):
    """The rows of a Slurm sweep whose queue could not be read are reported, but no network config
    is fitted from them (it would pass for the whole sweep), and the exit is not 0."""
    from ddlbench.commbench import cli, slurm
    from ddlbench.predict import network

    rows = [{"mode": "sizes", "collective": "all_reduce", "dtype": "fp32", "device": "cpu", "workers": 2,
             "backend": "gloo", "bytes": n, "time_us": 100.0 + n / 1e3, "time_us_p50": 100.0 + n / 1e3, "time_us_min": 99.0,
             "time_us_max": 120.0 + n / 1e3, "iters": 10, "algbw_GBps": 1.0, "busbw_GBps": 1.0,
             "wrong": 0} for n in (1024, 1 << 20)]

    def measure(*args):
        raise slurm.StillRunning(rows, "stopped following Slurm job 77 with 1 of 2 measurements done: squeue failed")

    def written(*args, **kwargs):
        raise AssertionError("a network config was written")

    monkeypatch.setattr(cli, "_measure_all", measure)
    monkeypatch.setattr(network, "replace_config", written)
    rc = cli.main(["--workers", "2", "--backends", "gloo", "--results", str(tmp_path), "--network-name", "x"])
    err = capsys.readouterr().err
    assert rc == 1
    assert ("commbench: no network config written: stopped following Slurm job 77 with 1 of 2 measurements done: "
            "squeue failed; rerun make commbench once squeue answers") in err
    monkeypatch.setattr(cli, "_measure_all", lambda *args: rows)  # the same rows, the sweep whole: fitted
    with pytest.raises(AssertionError, match="a network config was written"):
        cli.main(["--workers", "2", "--backends", "gloo", "--results", str(tmp_path), "--network-name", "x"])


def test_a_cuda_sweep_needs_a_gpu_per_rank_here(monkeypatch):
    """Every rank of a local CUDA measurement takes its own GPU (the ps mode's server too): a sweep
    larger than the GPUs visible is refused before any rank starts (it used to come back as
    'job exited with 1' rows)."""
    import torch

    from ddlbench.commbench import cli

    monkeypatch.setattr(cli, "why_unavailable", lambda *args, **kwargs: None)  # gloo and nccl usable
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(BadInput) as err:
        parse(["--devices", "cuda", "--backends", "gloo", "--workers", "2", "--mode", "groups"])
    assert "needs 4 GPUs" in str(err.value) and "2 are visible" in str(err.value)
    with pytest.raises(BadInput, match="needs 3 GPUs"):
        parse(["--devices", "cuda", "--backends", "gloo", "--workers", "2", "--mode", "ps"])
    a = parse(["--devices", "cuda", "--backends", "gloo", "--workers", "2", "--mode", "sizes"])
    assert a.backends == [("gloo", "cuda", None)]
    a = parse(["--devices", "cpu", "--backends", "gloo", "--workers", "4", "--mode", "groups"])  # no GPU asked
    assert a.backends == [("gloo", "cpu", None)]
    # across emulated hosts, hosts share the GPUs (gpu_slice wraps): Gloo takes that, NCCL does not
    a = parse(["--link", "1gbit", "--devices", "cuda", "--backends", "gloo", "--workers", "3", "--mode", "sizes"])
    assert a.backends == [("gloo", "cuda", None)]
    with pytest.raises(BadInput, match="NCCL across emulated hosts needs 3 GPUs"):
        parse(["--link", "1gbit", "--devices", "cuda", "--backends", "nccl", "--workers", "3", "--mode", "sizes"])
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(BadInput) as err:  # one GPU: no worker count fits, so none is suggested
        parse(["--devices", "cuda", "--backends", "gloo", "--workers", "2", "--mode", "sizes"])
    assert "within" not in str(err.value) and "--devices cpu" in str(err.value)


def test_a_new_network_config_keeps_the_one_it_replaces(tmp_path, monkeypatch, capsys):
    """A small or partial make commbench used to overwrite conf/network/<name>.yaml, a full
    sweep's calibration, without a word: the replaced config is now kept beside it (not a .yaml,
    so not a network), and commbench says where."""
    import yaml

    from ddlbench.commbench import cli
    from ddlbench.predict import network

    monkeypatch.setattr(network, "conf_dir", lambda: tmp_path)

    def rows(t_us):
        return [{"mode": "sizes", "collective": "all_reduce", "dtype": "fp32", "device": "cpu", "workers": 2,
                 "backend": "gloo", "bytes": n, "time_us": t_us + n / 1e3, "time_us_p50": t_us + n / 1e3,
                 "time_us_min": t_us, "time_us_max": t_us + n / 1e3, "iters": 10, "algbw_GBps": 1.0,
                 "busbw_GBps": 1.0, "wrong": 0} for n in (1024, 1 << 20)]

    first = cli.write_network(rows(100.0), "mine", tmp_path)
    calibrated = first.read_text()
    assert "kept" not in capsys.readouterr().out and not list(tmp_path.glob("*.bak"))
    again = cli.write_network(rows(300.0), "mine", tmp_path)  # another sweep: another fit
    assert again == first and again.read_text() != calibrated
    kept = list(tmp_path.glob("mine.yaml.*.bak"))
    assert len(kept) == 1 and kept[0].read_text() == calibrated
    assert f"the one it replaced is kept as {kept[0]}" in capsys.readouterr().out
    assert network.replace_config(yaml.safe_load(again.read_text()), tmp_path)[1] is None  # the same: nothing kept
    assert len(list(tmp_path.glob("*.bak"))) == 1


def test_network_dir_writes_the_config_there_not_into_conf_network(tmp_path, monkeypatch, capsys):
    """--network-dir (make bench-local: the network measured beside its runs, kept with its
    profiles): the config is written into that folder, made where missing, and conf/network is
    left as it was; make predict does not read it there, so commbench names no NETWORK= for it."""
    from ddlbench.commbench import cli
    from ddlbench.predict import network

    conf = tmp_path / "conf"
    conf.mkdir()
    monkeypatch.setattr(network, "conf_dir", lambda: conf)
    monkeypatch.setattr(network, "local_network_name", lambda: "local-box")
    rows = [{"mode": "sizes", "collective": "all_reduce", "dtype": "fp32", "device": "cpu", "workers": 2,
             "backend": "gloo", "bytes": n, "time_us": 100 + n / 1e3, "time_us_p50": 100 + n / 1e3, "time_us_min": 100,
             "time_us_max": 100 + n / 1e3, "iters": 10, "algbw_GBps": 1.0, "busbw_GBps": 1.0, "wrong": 0}
            for n in (1024, 1 << 20)]
    bench = tmp_path / "bench" / "profiles"
    assert cli.write_network(rows, None, tmp_path, directory=bench) == bench / "local-box.yaml"
    assert not list(conf.iterdir()) and network.load("local-box", bench).name == "local-box"
    out = capsys.readouterr().out
    assert f"written to {bench / 'local-box.yaml'}" in out and "NETWORK=" not in out
    assert cli.parse(["--network-dir", str(bench)]).network_dir == str(bench)


@pytest.mark.parametrize("args, words", [
    (["reproduce", "CLUSTER=slrum"], ["CLUSTER=slrum is invalid", "accepted: local slurm emulated"]),
    (["predict", "CLUSTER=foo"], ["CLUSTER=foo is invalid"]),
    (["reproduce", "CLUSTER=local slurm"], ["CLUSTER='local slurm' is invalid"]),
    (["reproduce", "LINK=100mbit"], ["LINK=100mbit", "CLUSTER=local", "accepted: CLUSTER=emulated"]),
    (["reproduce-paper", "CLUSTER=slurm", "INTRA_LINK=10gbit"], ["INTRA_LINK=10gbit", "CLUSTER=slurm"]),
])
def test_make_refuses_a_cluster_or_link_it_would_ignore(args, words, tmp_path):
    """CLUSTER=foo ran the whole local sweep and LINK without CLUSTER=emulated was dropped, both
    with exit 0: now one line, exit 2, before anything runs."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    import os
    import signal

    # its own session: where the check is missing, make starts a whole sweep, which the timeout
    # must end with every process it started
    with subprocess.Popen(["make", "-s", *args, f"RESULTS={tmp_path}", f"PY={sys.executable}",
                           "-o", ".venv/.installed"], cwd=repo, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            pytest.fail(f"make {' '.join(args)} ran on for 60 s instead of refusing")
    assert proc.returncode == 2, (out[-1000:], err[-1000:])
    # make's own "Error 2" after a recipe ("make[1]: *** [...]" under make test) is not the error
    line = [ln for ln in err.splitlines()
            if ("error" in ln or "***" in ln) and not re.match(r"make(\[\d+\])?: \*\*\* \[", ln)]
    assert len(line) == 1 and all(w in line[0] for w in words), err
    assert not list(tmp_path.iterdir())  # nothing ran


def test_a_cluster_exported_for_something_else_does_not_stop_other_targets():
    import os
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run(["make", "-n", "clean"], cwd=repo, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "CLUSTER": "prod"})
    assert proc.returncode == 0, proc.stderr


def test_a_failed_jobs_error_row_says_why_from_its_ranks_stderr(tmp_path, capsys):
    """A rank's traceback went to /dev/null: the record said only `job exited with 1` (as CI's
    intermittent ps-mode failure did). Now the error row and stderr carry its last lines."""
    import os

    from ddlbench.commbench.cli import LOG_TAIL_LINES, _rows, run_jobs

    log = tmp_path / "stderr.log"
    script = "for i in $(seq 1 30); do echo noise $i >&2; done; echo 'RuntimeError: the server went away' >&2; exit 3"
    rc = run_jobs([(["sh", "-c", script], dict(os.environ))], 30.0, log=log)
    assert rc == 3
    spec = {"out": str(tmp_path / "rows.jsonl")}
    (row,) = _rows(spec, rc, "gloo", 2, 30.0, {}, log)
    assert row["error"] == "gloo x2 job exited with 3"
    tail = row["stderr_tail"].splitlines()
    assert len(tail) == LOG_TAIL_LINES and tail[-1] == "RuntimeError: the server went away"
    assert "the server went away" in capsys.readouterr().err
    # a job that succeeds keeps its rows as they are, whatever its ranks printed
    (tmp_path / "rows.jsonl").write_text('{"time_us": 1}\n')
    assert _rows(spec, 0, "gloo", 2, 30.0, {}, log) == [{"time_us": 1, "env": {}}]
    # rank 0 writes a line per measurement as it finishes: a job that fails later keeps those and
    # still says it failed (a line cut short by the kill is left out)
    (tmp_path / "rows.jsonl").write_text('{"time_us": 1}\n{"time_u')
    kept, failed = _rows(spec, 3, "gloo", 2, 30.0, {}, log)
    assert kept == {"time_us": 1, "env": {}}
    assert failed["error"] == "gloo x2 job exited with 3 after 1 measurement(s)" and "stderr_tail" in failed


def test_the_progress_relay_drains_a_ranks_stdout_after_ours_is_gone(monkeypatch):
    """`commbench | head`: once our stdout is closed, the relay must still read the launcher's
    pipe, or rank 0 blocks on a full one (64 KiB of progress) until --timeout."""
    import os
    import threading

    from ddlbench.commbench.cli import relay

    class Gone:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("sys.stdout", Gone())
    r, w = os.pipe()
    thread, pipe = relay(os.fdopen(r, "rb"))
    writer = threading.Thread(target=lambda: (os.write(w, b"[commbench gloo x2] all_reduce fp32 4 B\n" * 8192),
                                              os.close(w)), daemon=True)
    writer.start()
    writer.join(timeout=10)  # 320 KiB: blocks for good if nobody reads
    assert not writer.is_alive()
    thread.join(timeout=10)
    assert not thread.is_alive()
    pipe.close()


def test_a_failed_jobs_stderr_tail_starts_with_the_first_traceback(tmp_path):
    """torchrun's summary of every rank (20+ lines) buried the failing rank's traceback."""
    from ddlbench.commbench.cli import log_tail

    log = tmp_path / "stderr.log"
    tb = ["[rank1]: Traceback (most recent call last):", '[rank1]:   File "x.py", line 3, in f',
          "[rank1]:     raise RuntimeError('nothing from rank 0 within 60 s')",
          "[rank1]: RuntimeError: nothing from rank 0 within 60 s"]
    log.write_text("\n".join(["warming up"] + tb + [f"summary {i}" for i in range(40)]) + "\n")
    lines = log_tail(log, lines=5).splitlines()
    assert lines[:4] == tb and lines[4] == "..." and lines[5:] == [f"summary {i}" for i in range(35, 40)]
    log.write_text("no traceback\n" * 3)
    assert log_tail(log) == "no traceback\nno traceback\nno traceback"
    assert log_tail(tmp_path / "missing.log") == ""


def test_a_commbench_job_that_lost_its_cores_to_other_guests_is_warned_of():
    """commbench keeps each job's share of the machine's cores stolen by the hypervisor while it
    ran (`job_steal_share`, on every row of the job); at metrics.DISTURBED_STEAL_SHARE or more
    the job is named once in a warning as the network is written; below it, or unrecorded, not."""
    from ddlbench.commbench.cli import steal_warnings

    job = {"mode": "sizes", "backend": "gloo", "workers": 4, "started_at": "t", "job_steal_share": 0.15}
    rows = [{**job, "bytes": n} for n in (4, 1024)] + [{**job, "workers": 2, "job_steal_share": 0.02},
                                                       {**job, "workers": 3, "job_steal_share": None},
                                                       {"mode": "fusion", "workers": 2}]
    [warning] = steal_warnings(rows)
    assert warning.startswith("the sizes job of gloo at 4 workers lost 15% of this machine's cores to other guests")
    assert "run make commbench again" in warning
    assert steal_warnings(rows[2:]) == []
