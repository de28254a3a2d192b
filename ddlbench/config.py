"""Configuration: what is accepted, checked before any process starts, with one-line errors.

Two stages. `preflight(overrides)` runs on the raw command line: group choices (method=,
model=, ...) must name a config file, a torchvision classifier name becomes
`model=torchvision model.arch=NAME`, and the result must compose. `resolve(cfg)` then checks
values and fills the derived ones (device, local batch, backend, distinct batches) so workers
and records see concrete values.
"""
from __future__ import annotations

import functools
import itertools
import math
import os
import re
from importlib import resources
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from ddlbench import hostcpu

GROUPS = ("method", "model", "profile", "engine", "launcher", "experiment")
DEVICES = ("auto", "cpu", "cuda")
BACKENDS = ("auto", "gloo", "nccl", "mpi")
REPEAT_MODES = ("launch", "process")
BYTESCHEDULER_PS_VARIANTS = ("worker", "byteps")  # ByteScheduler's queue, or the study's BytePS server schedule
# profile.distinct_batches=auto: one batch per iteration of a repeat, but never more than this
# many, all of them held on the device (a long run, say 100000 iterations, must not hold them all).
AUTO_DISTINCT_BATCHES_MAX = 16
# Launchers that start runs on a cluster's nodes: there `device: auto` means the GPUs.
CLUSTER_LAUNCHERS = ("slurm",)


class ConfigError(ValueError):
    """A bad setting; the message is one line naming the value and what is accepted."""


def conf_dir() -> Path:
    return Path(str(resources.files("ddlbench.conf")))


@functools.lru_cache(maxsize=None)
def compute_only_at_one_worker(method: str) -> bool:
    """Whether one worker of `method` in this runtime only computes, so that its run measures the
    setup's one-worker throughput: all-reduce methods (nothing to send) but ByteScheduler, whose
    queue, threads and per-parameter updates run at one worker too; PS methods push through their
    servers even then. False for a method with no config here."""
    import yaml

    path = conf_dir() / "method" / f"{method}.yaml"
    if not path.exists():
        return False
    cfg = yaml.safe_load(path.read_text())
    return cfg.get("architecture") == "a2a" and cfg.get("schedule") != "bytescheduler"


def choices(group: str) -> list[str]:
    return sorted(p.stem for p in (conf_dir() / group).glob("*.yaml"))


def _bad(what: str, value, accepted) -> ConfigError:
    return ConfigError(f"unknown {what} {value!r}; accepted: {', '.join(map(str, accepted))}")


def preflight(overrides: list[str]) -> list[str]:
    """Check the command line before anything starts; return the overrides to hand to Hydra.

    Group choices must name a config (a torchvision classifier name becomes
    `model=torchvision model.arch=NAME`), and every combination a sweep expands to must
    compose and pass `resolve`, so a bad value fails here, not half-way through a sweep."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    flags = [o for o in overrides if o.startswith("-")]
    plain = [o for o in overrides if not o.startswith("-")]
    try:
        parsed = OverridesParser.create().parse_overrides(plain)
    except HydraException as exc:
        raise ConfigError(f"cannot parse overrides {' '.join(plain)!r}: {str(exc).splitlines()[0]}") from None
    out, sweeps, sweep_texts = [], [], []
    for text, ov in zip(plain, parsed):
        key = ov.key_or_group
        values = list(ov.sweep_string_iterator()) if ov.is_sweep_override() else None
        if key in GROUPS and not ov.is_delete():
            accepted = choices(key)
            unknown = [v for v in (values or [ov.get_value_element_as_str()]) if v not in accepted]
            if key == "model" and values is None and unknown:
                out += _torchvision_model(unknown[0], accepted)
                continue
            if unknown:
                extra = ["or any torchvision classifier"] if key == "model" else []
                raise _bad(key, unknown[0], accepted + extra)
        if values is not None:
            sweep_texts.append(text)
            if not key.startswith("hydra"):
                sweeps.append([f"{key}={v}" for v in values])
        else:
            out.append(text)
    fixed = [o for o in out if not o.startswith("hydra")]
    # An experiment config sweeps through `hydra.sweeper.params`; the command line wins per key.
    given = {o.split("=", 1)[0].lstrip("+") for o in plain}
    for key, values in _experiment_sweeps(fixed).items():
        if key not in given:
            sweeps.append([f"{key}={v}" for v in values])
            sweep_texts.append(f"{key}={','.join(values)}")
    for combo in itertools.product(*sweeps):
        resolve(_compose(fixed + list(combo)))
    # Hydra composes a multirun's base config with the default group choices; a setting under a
    # swept group (method.partition_bytes with method=a,b) exists only in the jobs. Every job was
    # checked above with the key strict, so hand such settings to Hydra as `++key=value`.
    swept = {o.split("=", 1)[0] + "." for o in sweep_texts if o.split("=", 1)[0] in GROUPS}
    out = [f"++{o}" if any(o.startswith(g) for g in swept) else o for o in out]
    return flags + out + [t for t in sweep_texts if t.split("=", 1)[0] in given]


def _experiment_sweeps(overrides: list[str]) -> dict[str, list[str]]:
    """{key: values} an `experiment=` config sweeps (its hydra.sweeper.params)."""
    if not any(o.split("=", 1)[0].lstrip("+") == "experiment" for o in overrides):
        return {}
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser

    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        hcfg = compose("config", overrides=overrides, return_hydra_config=True)
    params = hcfg.hydra.sweeper.get("params") or {}
    parsed = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()])
    return {ov.key_or_group: list(ov.sweep_string_iterator()) if ov.is_sweep_override()
            else [ov.get_value_element_as_str()] for ov in parsed}


def _torchvision_model(name: str, accepted: list[str]) -> list[str]:
    from ddlbench.models.vision import classification_models

    if name not in classification_models():
        raise _bad("model", name, accepted + ["or a torchvision classifier (e.g. vgg16, resnet18)"])
    return ["model=torchvision", f"model.arch={name}"]


def _compose(overrides: list[str]) -> DictConfig:
    """Compose like Hydra will; unknown keys and type errors become one-line errors."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
            return compose("config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as exc:
        msg = " ".join(str(exc).split())
        unknown = re.search(r"Could not override '([^']+)'", msg)
        if unknown:
            raise _unknown_key(unknown.group(1)) from None
        raise ConfigError(f"bad override: {msg}") from None


def _unknown_key(key: str) -> ConfigError:
    from hydra import compose, initialize_config_dir

    parent, _, leaf = key.rpartition(".")
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        node = compose("config")
    node = OmegaConf.select(node, parent) if parent else node
    keys = sorted(node.keys()) if isinstance(node, DictConfig) else []
    where = f"under {parent!r}" if parent else "at the top level"
    return ConfigError(f"unknown setting {key!r}; accepted {where}: {', '.join(keys)}")


def _int(cfg, key: str, minimum: int) -> int:
    value = OmegaConf.select(cfg, key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{key}={value!r} is invalid; accepted: an integer >= {minimum}")
    return value


def _switch(cfg, key: str) -> None:
    """An on/off setting, where the config has it: true or false (not `maybe`, not `1`)."""
    value = OmegaConf.select(cfg, key, default=None)
    if value is not None and not isinstance(value, bool):
        raise ConfigError(f"{key}={value!r} is invalid; accepted: true, false")


def _number(cfg, key: str, low: float, high: float | None = None, low_open: bool = True) -> None:
    """A real-valued setting: a finite number above `low` (or at it, `low_open=False`), below `high`."""
    value = OmegaConf.select(cfg, key)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and (value > low if low_open else value >= low) and (high is None or value < high)
    if not ok:
        bounds = f"{'>' if low_open else '>='} {low:g}" + (f" and < {high:g}" if high is not None else "")
        raise ConfigError(f"{key}={value!r} is invalid; accepted: a number {bounds}")


# The models' sizes (conf/model/): integers >= 1 where a model has them.
MODEL_SIZES = ("image_size", "num_classes", "width", "seq_len", "hidden_size", "num_hidden_layers",
               "num_attention_heads", "intermediate_size", "vocab_size")
SWITCHES = ("trace", "save_params", "skip_recorded", "launcher.share_gpu", "launcher.pin_ranks")


def _check_model(cfg) -> None:
    m = cfg.model
    for key in MODEL_SIZES:
        if key in m:
            _int(cfg, f"model.{key}", 1)
    if "hidden_size" in m and "num_attention_heads" in m and m.hidden_size % m.num_attention_heads:
        raise ConfigError(f"model.hidden_size={m.hidden_size} is not a multiple of model.num_attention_heads="
                          f"{m.num_attention_heads}; accepted: heads that divide the hidden size")


def resolve(cfg: DictConfig) -> DictConfig:
    """Validate a composed config and fill derived values (device, local_batch, backend,
    profile.distinct_batches). In place."""
    with open_dict(cfg):
        _int(cfg, "workers", 1)
        # null = every worker on one machine; left null in the record so that one host's runs at
        # different worker counts stay one setup (see analysis.tables)
        if cfg.launcher.get("workers_per_node") is not None:
            _int(cfg, "launcher.workers_per_node", 1)
        if cfg.servers == "auto":  # one per worker machine, as BytePS and the study
            cfg.servers = 0 if cfg.method.architecture != "ps" else math.ceil(cfg.workers / workers_per_node(cfg))
        _int(cfg, "servers", 0)
        _int(cfg, "profile.warmup_iters", 0)
        _int(cfg, "profile.measured_iters", 1)
        _int(cfg, "profile.repeats", 1)
        if "compute_probe_iters" in cfg.profile:
            _int(cfg, "profile.compute_probe_iters", 0)
        if "comm_probe_rounds" in cfg.profile:
            _int(cfg, "profile.comm_probe_rounds", 0)
        if cfg.profile.distinct_batches == "auto":  # every iteration of a repeat gets its own batch
            cfg.profile.distinct_batches = min(cfg.profile.warmup_iters + cfg.profile.measured_iters,
                                               AUTO_DISTINCT_BATCHES_MAX)
        _int(cfg, "profile.distinct_batches", 1)
        if cfg.profile.repeat_mode not in REPEAT_MODES:
            raise _bad("profile.repeat_mode", cfg.profile.repeat_mode, REPEAT_MODES)
        if cfg.device not in DEVICES:
            raise _bad("device", cfg.device, DEVICES)
        if cfg.device == "auto":
            cfg.device = default_device(cfg.launcher.name)
        if cfg.backend not in BACKENDS:
            raise _bad("backend", cfg.backend, BACKENDS)
        if cfg.backend == "auto":
            cfg.backend = default_backend(cfg.device)
        if cfg.backend == "nccl" and cfg.device != "cuda":
            raise ConfigError("backend='nccl' needs device=cuda; accepted on cpu: gloo, mpi")
        if cfg.local_batch is None:
            cfg.local_batch = cfg.profile.local_batch if cfg.profile.local_batch is not None else cfg.model.local_batch
        _int(cfg, "local_batch", 1)
        _int(cfg, "seed", 0)
        for key in ("comm_timeout_s", "startup_timeout_s", "launcher.stall_timeout_s"):
            _seconds(cfg, key)
        threads = cfg.launcher.get("threads_per_worker", "auto")
        if threads != "auto":
            _int(cfg, "launcher.threads_per_worker", 1)
        if "max_workers_per_cpu" in cfg.launcher:
            _int(cfg, "launcher.max_workers_per_cpu", 1)
        policy = cfg.launcher.get("gloo_loop_policy")
        if policy is not None and policy not in hostcpu.GLOO_LOOP_POLICIES:
            raise ConfigError(f"launcher.gloo_loop_policy={policy!r} is invalid; accepted: "
                              f"{', '.join(hostcpu.GLOO_LOOP_POLICIES)}, null (left alone)")
        for key in SWITCHES:
            _switch(cfg, key)
        _number(cfg, "optimizer.lr", 0)
        _number(cfg, "optimizer.momentum", 0, 1, low_open=False)
        _check_model(cfg)
        _check_results_dir(cfg)
        _check_method(cfg)
        _check_engine(cfg)
        _check_placement(cfg)
        if cfg.launcher.name == "slurm":
            _slurm().check(cfg)
        if cfg.launcher.name == "emulated":
            from ddlbench.launch.emulated import check

            check(cfg)
        if cfg.launcher.name == "mpirun":
            from ddlbench.launch.mpirun import executable

            executable(cfg)  # an MPI is installed
    return cfg


def _seconds(cfg, key: str) -> None:
    """A duration setting, where the config has it: a finite number of seconds > 0."""
    value = OmegaConf.select(cfg, key, default=None)
    if value is None and key.startswith("launcher."):
        return  # this launcher has no such setting
    if isinstance(value, bool) or not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ConfigError(f"{key}={value!r} is invalid; accepted: seconds > 0 (a finite number)")


# `%` starts a Slurm filename pattern (%j, %N, ...) and whitespace splits a path in the batch
# script's lines, so neither may appear in the paths a Slurm job is given.
SLURM_PATH_UNSAFE = re.compile(r"[%\s]")


def _check_results_dir(cfg) -> None:
    """`results_dir` is a directory this user can write, or can be created: said now, not when
    the first record is due. Nothing is created or changed here (shared directories keep their
    owner and mode)."""
    given = cfg.results_dir
    if not isinstance(given, str) or not given.strip():
        raise ConfigError(f"results_dir={given!r} is invalid; accepted: a directory path")
    path = Path(given).expanduser().absolute()
    if cfg.launcher.name == "slurm" and SLURM_PATH_UNSAFE.search(str(path)):
        raise ConfigError(f"results_dir={given!r} ({path}) has a space or '%', which Slurm's batch scripts and "
                          f"filename patterns break on; accepted on launcher=slurm: a path without spaces or '%'")
    from ddlbench.record import unusable_dir

    # the deepest that exists must take new entries; where records/ does, results_dir itself too
    records = path / "records"
    bad = unusable_dir(records) or (unusable_dir(path) if records.exists() or records.is_symlink() else None)
    if bad is None:
        return
    d, why = bad
    if why == "not a directory":
        raise ConfigError(f"results_dir={given!r} is unusable: {d} exists and is not a directory; "
                          f"accepted: a directory path")
    where = f"{d} is" if d in (path, records) else f"would be created under {d}, which is"
    raise ConfigError(f"results_dir={given!r} is unusable: {where} not writable by this user; "
                      f"accepted: a directory you can write (or create)")


def default_device(launcher: str) -> str:
    """`device: auto`: the GPUs on a cluster launcher (what the study measured), the CPU here."""
    return "cuda" if launcher in CLUSTER_LAUNCHERS else "cpu"


def default_backend(device: str) -> str:
    """`backend: auto`: NCCL on GPUs, Gloo on the CPU."""
    return "nccl" if device.startswith("cuda") else "gloo"


def workers_per_node(cfg) -> int:
    """Consecutive worker ranks that share a machine (`launcher.workers_per_node`: Slurm's
    nodes, or a layout for local runs); launchers without it put every worker on one machine."""
    return cfg.launcher.get("workers_per_node") or cfg.workers


def _check_method(cfg) -> None:
    from ddlbench.methods import ARCHITECTURES, PS_ENGINES, SCHEDULES, TOPOLOGIES

    m = cfg.method
    if m.schedule not in SCHEDULES:
        raise _bad("method.schedule", m.schedule, SCHEDULES)
    if m.architecture not in ARCHITECTURES:
        raise _bad("method.architecture", m.architecture, ARCHITECTURES)
    if m.architecture == "a2a" and cfg.servers != 0:
        raise ConfigError(f"servers={cfg.servers} with method={m.name}: all-reduce methods use no servers; accepted: 0")
    if m.architecture == "ps" and cfg.servers < 1:
        raise ConfigError(f"servers={cfg.servers} with method={m.name}: a parameter-server method needs servers; accepted: 1 or more")
    if "partition_bytes" in m:
        _int(cfg, "method.partition_bytes", 1)
    if m.architecture == "ps" and m.get("transport", "zmq") not in PS_ENGINES:
        raise _bad("method.transport", m.transport, PS_ENGINES)
    for key in ("partition_params", "credit_params"):  # ByteScheduler's units: parameters
        if key in m:
            _int(cfg, f"method.{key}", 1)
    if "fusion_elems" in m:
        _int(cfg, "method.fusion_elems", 0)
    if "scheduler" in m and m.scheduler not in BYTESCHEDULER_PS_VARIANTS:
        raise _bad("method.scheduler", m.scheduler, BYTESCHEDULER_PS_VARIANTS)
    if "ps_topology" in m and m.ps_topology not in TOPOLOGIES:
        raise _bad("method.ps_topology", m.ps_topology, TOPOLOGIES)
    if "server_engine_threads" in m:
        _int(cfg, "method.server_engine_threads", 1)
    if "bucket_cap_mb" in m:
        _number(cfg, "method.bucket_cap_mb", 0)
    for key in ("alpha_s", "beta_s_per_byte"):
        if key in m and m[key] is not None and not (isinstance(m[key], (int, float)) and m[key] >= 0):
            raise ConfigError(f"method.{key}={m[key]!r} is invalid; accepted: null (fitted) or a number >= 0")
    if m.schedule == "mgwfbp":
        _int(cfg, "method.min_group_numel", 0)
        _int(cfg, "method.profile_iters", 1)
        _int(cfg, "method.bench_reps", 1)
        low = _int(cfg, "method.bench_min_bytes", 4)
        _int(cfg, "method.bench_max_bytes", low)


def _slurm():
    from ddlbench.launch import slurm

    return slurm


def _check_engine(cfg) -> None:
    from ddlbench.engines import ENGINES, EngineUnavailable, import_horovod

    engine, launcher, m = cfg.engine.name, cfg.launcher.name, cfg.method
    if engine not in ENGINES:
        raise _bad("engine", engine, ENGINES)
    if m.schedule == "horovod" and engine != "horovod":
        raise ConfigError(f"method=horovod is Horovod's own optimizer; accepted with engine=horovod only (engine={engine})")
    if launcher == "horovodrun" and engine != "horovod":
        raise ConfigError(f"launcher=horovodrun starts Horovod jobs; accepted with engine=horovod only (engine={engine})")
    if engine != "horovod":
        return
    if m.architecture != "a2a" or m.schedule == "ddp":
        accepted = [c for c in choices("method") if c.endswith("-a2a") or c in ("mg-wfbp", "horovod")]
        raise ConfigError(f"method={m.name} does not run on engine=horovod (the study ran its PS methods on BytePS; "
                          f"here they run on ddlbench's PS engine with engine=torch); accepted: {', '.join(accepted)}")
    if launcher == "local":
        raise ConfigError("engine=horovod is started by horovodrun or mpirun; accepted: launcher=horovodrun, "
                          "launcher=mpirun or launcher=slurm (not local, which is torchrun)")
    try:
        import_horovod()
    except EngineUnavailable as exc:
        raise ConfigError(str(exc)) from None


def local_capacity(cfg) -> tuple[int, str]:
    """How many workers the local launcher can place on this host, and why."""
    if cfg.device == "cuda":
        import torch

        n = torch.cuda.device_count()
        if cfg.launcher.get("share_gpu"):
            per = int(cfg.launcher.max_workers_per_cpu)
            return n * per, f"{per} per GPU x {n} visible GPU(s), launcher.share_gpu=true"
        return n, f"{n} visible GPU(s)"
    cores = usable_cores()
    per = int(cfg.launcher.max_workers_per_cpu)
    return cores * per, f"{per} per core x {cores} cores"


def _check_placement(cfg) -> None:
    if cfg.launcher.name not in ("local", "mpirun", "horovodrun") or cfg.launcher.get("hosts"):
        return
    if cfg.launcher.get("share_gpu") and cfg.backend != "gloo":
        raise ConfigError(f"launcher.share_gpu=true with backend={cfg.backend}: NCCL refuses two ranks on one GPU; "
                          f"accepted: backend=gloo")
    if cfg.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("device=cuda but no GPU is visible here; accepted: device=cpu")
    capacity, why = local_capacity(cfg)
    if cfg.workers > capacity:
        raise ConfigError(
            f"workers={cfg.workers} is more than the local launcher can place ({capacity}: {why}); "
            f"accepted: 1..{capacity}, or a cluster launcher"
        )
    if cfg.device == "cpu" and cfg.workers + cfg.servers > capacity:
        raise ConfigError(f"workers={cfg.workers} + servers={cfg.servers} is more processes than the local "
                          f"launcher can place ({capacity}); accepted: workers + servers <= {capacity}")


def usable_cores() -> int:
    """The cores this process may use: its CPU affinity (taskset, cgroup cpusets), and within a
    Slurm job, no more than Slurm allotted the job on this node (SLURM_CPUS_ON_NODE), whether or
    not the cluster enforces it. os.cpu_count() counts the whole machine: ranks that sized their
    threads by it oversubscribed shared nodes (and the emulated cluster's Slurm nodes, which
    share one machine's cores, ran 2.7x slower than the same job launched directly)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    slurm = os.environ.get("SLURM_CPUS_ON_NODE", "")
    if slurm.isdigit() and int(slurm) > 0:
        cores = min(cores, int(slurm))
    return max(1, cores)


def threads_for(procs: int) -> int:
    """OpenMP threads for each of `procs` processes sharing this host's usable cores."""
    return max(1, usable_cores() // procs)


def threads_per_worker(cfg, local_procs: int | None = None) -> int:
    """The launcher's `threads_per_worker` where set; `auto`: this host's cores shared by the
    processes on it (`local_procs`; by default every worker and server of the run)."""
    t = cfg.launcher.get("threads_per_worker", "auto")
    if t == "auto":
        return threads_for(cfg.workers + cfg.servers if local_procs is None else local_procs)
    return int(t)
