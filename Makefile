# ddlbench: `make test` sets everything up and runs the tests; `make reproduce` runs the study's
# methods on this machine and prints the results table. Variables below; see README.md.
PYTHON   ?= python3
VENV     ?= .venv
PY       := $(VENV)/bin/python
# torch 2.13.0 is a CPU build on CI and dev machines here; on a GPU cluster set TORCH_SPEC to the
# torch you want (pyproject.toml only asks for torch>=2.1).
TORCH_SPEC ?= torch==2.13.0

METHOD   ?= all
# On an emulated cluster the workers default to every worker slot: NODES x GPUS_PER_NODE.
WORKERS  ?= $(if $(and $(filter emulated,$(CLUSTER)),$(NODES)),$(shell echo $$(( $(NODES) * $(or $(GPUS_PER_NODE),1) ))),2)
MODEL    ?= resnet50
PROFILE  ?= local
RESULTS  ?= results
WARMUP   ?=
ITERS    ?=
REPEATS  ?=
OVERRIDES ?=

ENGINE   ?= torch
CLUSTER  ?= local
DRY_RUN  ?=
CLUSTERS := local slurm emulated
# checked for the goals that read it (a CLUSTER exported for something else must not stop make test)
ifneq ($(filter reproduce reproduce-paper commbench predict bench,$(MAKECMDGOALS)),)
ifneq ($(words $(CLUSTER)),1)
$(error CLUSTER='$(CLUSTER)' is invalid; accepted: $(CLUSTERS))
endif
ifeq ($(filter $(CLUSTER),$(CLUSTERS)),)
$(error CLUSTER=$(CLUSTER) is invalid; accepted: $(CLUSTERS))
endif
endif

comma := ,
ALL_METHODS := bsp-ps,bsp-a2a,wfbp-ps,wfbp-a2a,mg-wfbp,bytescheduler-ps,bytescheduler-a2a,ddp
# Horovod runs the all-reduce methods; its own DistributedOptimizer is the reference there.
HVD_METHODS := bsp-a2a,wfbp-a2a,mg-wfbp,bytescheduler-a2a,horovod
all_methods := $(if $(filter horovod,$(ENGINE)),$(HVD_METHODS),$(ALL_METHODS))
methods  := $(if $(filter all,$(METHOD)),$(all_methods),$(METHOD))
# CLUSTER=slurm submits batch jobs; CLUSTER=emulated runs NODES hosts as network namespaces of this
# machine (root), links shaped to LINK (any tc rate; INTRA_LINK shapes traffic inside a host);
# locally Horovod starts with horovodrun, the rest with torchrun. On CLUSTER=emulated, LAUNCHER=
# torchrun|horovodrun|mpirun says how the ranks start across the hosts (launcher.via: torchrun per
# host; horovodrun, the default with ENGINE=horovod, or mpirun from the first host over ssh).
LAUNCHER ?= $(if $(filter slurm emulated,$(CLUSTER)),$(CLUSTER),$(if $(filter horovod,$(ENGINE)),horovodrun,local))
PARTITION ?=
GPUS_PER_NODE ?=
NODES    ?=
LINK     ?=
INTRA_LINK ?=
VIA      := $(if $(filter emulated,$(CLUSTER)),$(filter torchrun horovodrun mpirun,$(LAUNCHER)))
launcher_name := $(if $(VIA),emulated,$(LAUNCHER))
emulated_args := $(if $(filter emulated,$(launcher_name)),$(if $(NODES),launcher.nodes=$(NODES)) \
	$(if $(LINK),launcher.link=$(LINK)) $(if $(INTRA_LINK),launcher.intra_link=$(INTRA_LINK)) $(if $(VIA),launcher.via=$(VIA)))
cluster_args := engine=$(ENGINE) launcher=$(launcher_name) $(if $(DRY_RUN),launcher.dry_run=true) \
	$(if $(PARTITION),launcher.partition=$(PARTITION)) $(if $(GPUS_PER_NODE),launcher.workers_per_node=$(GPUS_PER_NODE)) \
	$(emulated_args)
run_args := model=$(MODEL) profile=$(PROFILE) results_dir=$(RESULTS) $(cluster_args) \
	$(if $(WARMUP),profile.warmup_iters=$(WARMUP)) $(if $(ITERS),profile.measured_iters=$(ITERS)) \
	$(if $(REPEATS),profile.repeats=$(REPEATS)) $(OVERRIDES)

.PHONY: install horovod test reproduce reproduce-paper bench summary figures commbench predict clean \
	cluster-up cluster-down cluster-status shell bench-emulated bench-local

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -c "import torch; print('torch==' + torch.__version__.split('+')[0])" > $(VENV)/constraints.txt
	$(PY) -m pip install -q -c $(VENV)/constraints.txt -e ".[test,mpi]"
	touch $@

install: $(VENV)/.installed

# Horovod 0.28.1 built against the installed torch (3-6 minutes on 2 cores); see the script.
$(VENV)/.horovod: $(VENV)/.installed launch/install/horovod.sh
	bash launch/install/horovod.sh $(PY)
	touch $@

horovod: $(VENV)/.horovod

# Two pytest workers: the suite mostly waits (start-ups, timeouts); see tests/conftest.py.
TEST_JOBS ?= 2
# The tests build Horovod first so its tests run; if the build fails they skip and say why.
test: install
	@$(MAKE) --no-print-directory horovod || echo "*** Horovod did not build: its tests will skip (see the output above)"
	$(PY) -m pytest -q -n $(TEST_JOBS) tests

# The methods at WORKERS workers, then (once per setup) one worker for the speedup, then the table.
# METHOD=auto: per worker count, the method the predictor picks (ddlbench.predict.auto prints which
# and why), run with the prediction kept in its record. NETWORK=... overrides the cluster's network.
PROFILE_FROM ?=
auto_args = --model $(MODEL) --profile $(PROFILE) --cluster $(CLUSTER) $(if $(LINK),--link $(LINK)) $(if $(PARTITION),--partition $(PARTITION)) \
	$(if $(GPUS_PER_NODE),--workers-per-node $(GPUS_PER_NODE)) $(if $(INTRA_LINK),--intra-link $(INTRA_LINK)) $(if $(INTRA),--intra $(INTRA)) \
	$(if $(ONE_WORKER),--one-worker $(ONE_WORKER)) \
	$(if $(filter command line environment,$(origin NETWORK)),--network $(NETWORK)) $(if $(PROFILE_FROM),--profile-from $(PROFILE_FROM)) \
	$(if $(PS_TOPOLOGY),--ps-topology $(PS_TOPOLOGY))
# PS_TOPOLOGY=per-gpu: the PS methods run with method.ps_topology=per-gpu (every worker pushes); with
# METHOD=auto it is predicted so, and passed on if a PS method wins.
not_ps := $(filter-out %-ps,$(subst $(comma), ,$(methods)))
ps_methods := $(filter %-ps,$(subst $(comma), ,$(ALL_METHODS)))
# LINK and INTRA_LINK shape the emulated cluster's links; elsewhere they would be ignored.
check_links = if [ -n "$(LINK)$(INTRA_LINK)" ] && [ "$(launcher_name)" != emulated ]; then \
	echo "$@: error: LINK=$(LINK) INTRA_LINK=$(INTRA_LINK) with CLUSTER=$(CLUSTER): links are emulated only; accepted: CLUSTER=emulated, or leave them out" >&2; exit 2; fi
reproduce: install
	@$(check_links)
	@status=0; \
	if [ "$(METHOD)" = auto ]; then \
		for w in $(subst $(comma), ,$(WORKERS)); do \
			choice=$$($(PY) -m ddlbench.predict.auto $(auto_args) --workers $$w) || exit 2; \
			$(PY) -m ddlbench $${choice% *} "$${choice##* }" workers=$$w $(run_args) || status=$$?; \
		done; \
	elif [ -n "$(PS_TOPOLOGY)" ] && [ -n "$(not_ps)" ]; then \
		echo "reproduce: error: PS_TOPOLOGY=$(PS_TOPOLOGY) with METHOD=$(METHOD), whose $(not_ps) are not PS methods; accepted: METHOD=auto or PS methods only ($(ps_methods))" >&2; exit 2; \
	else \
		$(PY) -m ddlbench --multirun method=$(methods) workers=$(WORKERS) $(run_args) \
			$(if $(PS_TOPOLOGY),method.ps_topology=$(PS_TOPOLOGY)) || status=$$?; \
	fi; \
	if [ $$status -eq 2 ]; then exit 2; fi; \
	$(PY) -m ddlbench method=bsp-a2a workers=1 skip_recorded=true $(run_args) || status=$$?; \
	$(PY) -m ddlbench.analysis.summary $(RESULTS); \
	exit $$status

# The study's Figure 4: every panel's sweep (conf/experiment/: seven methods x 4/8/16/32 GPUs,
# the study's protocol), plus each model's one-GPU baseline. On Slurm every run is queued at once
# (launcher.wait=false) and records itself when it ends; run it again to resume: recorded and
# still-queued runs are skipped. The baseline names device=cuda as the experiments do: the default
# (device=auto) means GPUs only on Slurm, and a local reproduce-paper is a GPU run too.
EXPERIMENTS ?= fig4a-resnet50 fig4b-bert-base fig4c-bert-large
paper_args := results_dir=$(RESULTS) $(cluster_args) $(if $(filter slurm,$(LAUNCHER)),launcher.wait=false) $(OVERRIDES)
reproduce-paper: install
	@$(check_links)
	@for e in $(EXPERIMENTS); do \
		$(PY) -m ddlbench experiment=$$e $(paper_args) || exit $$?; \
		$(PY) -m ddlbench method=bsp-a2a workers=1 model=$${e#*-} profile=study device=cuda skip_recorded=true \
			$(paper_args) || exit $$?; \
	done

# Predicted samples/s of every method at WORKERS on NETWORK (conf/network/), appended to
# $(RESULTS)/predictions.jsonl as "kind": "predicted" records, never read as measurements.
# INTRA=<node config> (e.g. pcie3x16) gives NETWORK's nodes that config's GPUs and link: for a
# network make commbench CLUSTER=slurm measured one rank per node (also METHOD=auto there).
# ONE_WORKER=<samples/s>: one worker's throughput on the target device, which the profile is scaled
# to (default: the study's one-GPU row, which exists for its three models at their batches only).
NETWORK  ?= 100gbib
INTRA    ?=
ONE_WORKER ?=
# DEVICE: where PROFILE_FROM=measured takes its one-worker profile (auto: cuda where a GPU is visible, else cpu).
DEVICE   ?=
# STACK=ddlbench predicts this project's runtime (default: the study's BytePS/Horovod stack);
# PS_TOPOLOGY=per-gpu its PS runs with method.ps_topology=per-gpu (every worker pushes).
STACK    ?=
PS_TOPOLOGY ?=
predict: install
	$(PY) -m ddlbench.predict --model $(MODEL) --workers $(WORKERS) --network $(NETWORK) --results $(RESULTS) \
		$(if $(filter-out all auto,$(METHOD)),--methods $(METHOD)) $(if $(PROFILE_FROM),--profile-from $(PROFILE_FROM)) \
		$(if $(INTRA),--intra $(INTRA)) $(if $(ONE_WORKER),--one-worker $(ONE_WORKER)) $(if $(DEVICE),--device $(DEVICE)) \
		$(if $(STACK),--stack $(STACK)) $(if $(PS_TOPOLOGY),--ps-topology $(PS_TOPOLOGY))

# EXPORT=PATH also writes every record (records/*.json merged with *.jsonl) into one JSON-lines file.
EXPORT   ?=
summary: install
	$(PY) -m ddlbench.analysis.summary $(RESULTS) $(if $(EXPORT),--export $(EXPORT))

# The study's Figure 4 and tables from every record in $(RESULTS), beside the published numbers.
figures: install
	$(PY) -m ddlbench.analysis.report $(RESULTS)

# Side-by-side ratios, measured in one invocation each (see benchmarks/).
bench: install
	$(PY) benchmarks/methods_vs_ddp.py --results $(RESULTS)/bench
	$(PY) benchmarks/ps_vs_a2a.py --results $(RESULTS)/bench
	$(PY) benchmarks/commbench_overhead.py

# The emulated cluster by hand: `make cluster-up NODES=4 LINK=1gbit [INTRA_LINK=...]` (runs that fit
# it use it), `make shell NODE=2` (a shell on host 2), `make cluster-down` (also clears a crashed
# run's leftovers). Needs root. SLURM=1 also starts Slurm across the hosts (slurmctld on the
# bridge, one slurmd per host; tests/cluster/slurm.sh), for `export SLURM_CONF=$(SLURM_DIR)/slurm.conf`
# and `make reproduce CLUSTER=slurm PARTITION=debug GPUS_PER_NODE=1 OVERRIDES=device=cpu`.
NODE ?= 0
SLURM ?=
SLURM_DIR ?= /run/ddlbench-slurm
slurm_sh := PYTHON=$(PY) EMULATED=1 bash tests/cluster/slurm.sh
cluster-up: install
	$(PY) -m ddlbench.launch.netns up $(or $(NODES),4) $(or $(LINK),1gbit) $(INTRA_LINK)
	$(if $(SLURM),$(slurm_sh) install && $(slurm_sh) start $(SLURM_DIR) && \
		echo "export SLURM_CONF=$(SLURM_DIR)/slurm.conf  # then: make reproduce CLUSTER=slurm PARTITION=debug ...")
cluster-down: install
	@if [ -f $(SLURM_DIR)/slurm.conf ]; then $(slurm_sh) stop $(SLURM_DIR) && rm -rf $(SLURM_DIR); fi
	$(PY) -m ddlbench.launch.netns down
cluster-status: install
	$(PY) -m ddlbench.launch.netns status
shell: install
	$(PY) -m ddlbench.launch.netns shell $(NODE)

# Every method (seven + DDP) at 2 and 4 workers on an emulated cluster of 4 worker hosts (one worker
# each; PS servers on hosts of their own), at each rate of BENCH_LINKS, plus one worker per rate:
# BSP-A2A for the speedup, and the two ByteScheduler methods, whose one worker runs their whole
# machinery (the predictor calibrates it from them), each with BENCH_ONE_REPEATS repeats (a repeat
# is BENCH_MEASURED_ITERS steps of ~5 ms: the median over several outlasts a disturbed one; repeats keep
# the setup, so the speedup still reads one worker's); records in $(RESULTS)/emulated, shown by
# `make figures RESULTS=$(RESULTS)/emulated`. After each rate's runs it measures that network as
# make commbench LINK=<rate> does (3-7 minutes here), kept with the bench's profiles as
# <records>/profiles/emulated-<rate>.yaml, which the validation reads for its runs in place of
# conf/network's (see bench-local's `bench_network`).
BENCH_LINKS ?= 100mbit 1gbit
BENCH_MODEL ?= tiny-resnet
BENCH_ONE_REPEATS ?= 6
# Each multi-worker run's repeats start with a compute probe of this many steps (driver: every
# worker times training steps alone, all at once): the predictor's validation takes one worker's
# compute from it, as the run ran, where a profile measured minutes apart mistimes it. With 4
# workers on 2 cores a run's two probes were 23% apart at the median over a bench at 8 steps
# (54% at most), 11% at 24 (23% at most). The one-worker runs take one too, so that what
# ByteScheduler's one-worker run adds to its compute is read against its own compute, timed
# minutes from nothing else (bl50 and bl51: its one-worker runs 22-25% apart, an hour apart).
BENCH_PROBE_ITERS ?= 24
# Each multi-worker run's repeats also time this many rounds of the model's gradients all-reduced one
# tensor each, all at once (driver: the communication probe, make commbench's fusion burst): on this
# machine's shared cores a message's cost drifts over minutes (the burst at 4 workers: 49.5 ms, then
# 81.6 ms ten minutes later), so the validation scales the network the bench measures at its end by
# each local run's probe against that burst (predict_validation.comm_scale).
BENCH_COMM_PROBE_ROUNDS ?= 10
# Each repeat times this many steps as one block, and each multi-worker run has BENCH_REPEATS of
# them. The local profile's 8 steps are 40 ms of tiny-resnet on this machine: one disturbance of the
# shared machine (a step at 13-20 ms in place of 6) moved a block by up to 45%, and two repeats of
# the same run were 1366 and 742 samples/s. The standard error of a run's mean, over the runs of
# two local and two emulated benches: at 8 x 2 a median of 1.1-2.9% and a worst of 7-30%; at
# 40 x 5, 0.9-1.4% and 3.0-6.2%.
BENCH_MEASURED_ITERS ?= 40
BENCH_REPEATS ?= 5
# The bench's two sweeps, given where they run ($(1): the launcher's overrides and results_dir).
bench_many = $(PY) -m ddlbench --multirun method=$(ALL_METHODS) workers=2,4 model=$(BENCH_MODEL) $(1) \
	profile.compute_probe_iters=$(BENCH_PROBE_ITERS) profile.comm_probe_rounds=$(BENCH_COMM_PROBE_ROUNDS) \
	profile.measured_iters=$(BENCH_MEASURED_ITERS) profile.repeats=$(BENCH_REPEATS) skip_recorded=true $(OVERRIDES)
bench_one = $(PY) -m ddlbench --multirun method=bsp-a2a,bytescheduler-ps,bytescheduler-a2a workers=1 \
	model=$(BENCH_MODEL) profile.measured_iters=$(BENCH_MEASURED_ITERS) profile.repeats=$(BENCH_ONE_REPEATS) \
	profile.compute_probe_iters=$(BENCH_PROBE_ITERS) \
	$(1) skip_recorded=true $(OVERRIDES)
bench-emulated: install
	@for link in $(BENCH_LINKS); do \
		$(call bench_many,launcher=emulated launcher.nodes=4 launcher.link=$$link results_dir=$(RESULTS)/emulated) || exit $$?; \
		$(call bench_one,launcher=emulated launcher.nodes=4 launcher.link=$$link results_dir=$(RESULTS)/emulated) || exit $$?; \
		test -f $(RESULTS)/emulated/profiles/emulated-$$link.yaml || \
			$(call bench_commbench,$(RESULTS)/emulated,--collectives all_reduce --link $$link) || exit $$?; \
	done
	$(PY) benchmarks/predict_validation.py --results $(RESULTS)/emulated --calibrate-only
	$(PY) -m ddlbench.analysis.summary $(RESULTS)/emulated

# The same runs on this machine (CLUSTER=local: every worker and the one PS server share its cores
# and talk over loopback), records in $(RESULTS)/local. Both benches end by measuring the profiles
# that calibrate their runs (into <records>/profiles: what a worker gets beside others drifts over
# minutes on a shared machine, so they are measured beside the runs); the predictor's check:
# `python benchmarks/predict_validation.py --results $(RESULTS)/local`, with the bench's own network
# (below; --local-network NAME for a bench without one: the network make commbench wrote on this
# machine, local-<hostname>; `loopback`, the config that ships, reads the
# per-tensor methods 40-60% off: its all-reduce is not this machine's; WORKERS=4 also times the
# 4-worker all-reduce, COLLECTIVES=all_reduce,reduce,broadcast the reduce and broadcast inside a
# per-machine PS node, CB_MODE=sizes,fusion,ps FUSION_MODELS=tiny-resnet,resnet50 the speed of
# Gloo's two concurrent all-reduces, from their per-tensor all-reduces launched one every
# FUSION_PACE_MS, 0.4 by default).
# The local bench also measures this machine's network as it finishes (`bench_network`: make
# commbench's all-reduce, reduce and broadcast at 2-4 workers, and its fusion rounds and PS bursts of
# BENCH_MODEL; about 4 minutes here), kept with its profiles as <records>/profiles/local-<hostname>.yaml
# (commbench's records in <records>/commbench), which the validation reads for its local runs in place
# of conf/network's: what a message costs the shared cores drifts over hours (per-machine PS at 2
# workers: 1.91 ms of the machine's CPU per key one morning, 2.44 ms that evening). A bench that has
# it keeps it (resuming one does not measure it again).
# One bench's network measurement ($(1): its records; $(2): what the collectives and hosts are), its
# fit into <records>/profiles.
bench_commbench = $(PY) -m ddlbench.commbench --workers 4 --backends gloo $(2) --dtypes fp32 --devices cpu \
	--mode sizes,fusion,ps --fusion-models $(BENCH_MODEL) --results $(1)/commbench --network-dir $(1)/profiles
bench_network = test -n "$$(ls $(1)/profiles/local-*.yaml 2>/dev/null)" || \
	$(call bench_commbench,$(1),--collectives all_reduce$(comma)reduce$(comma)broadcast)
bench-local: install
	$(call bench_many,results_dir=$(RESULTS)/local)
	$(call bench_one,results_dir=$(RESULTS)/local)
	$(call bench_network,$(RESULTS)/local)
	$(PY) benchmarks/predict_validation.py --results $(RESULTS)/local --calibrate-only
	$(PY) -m ddlbench.analysis.summary $(RESULTS)/local

# Communication backends: collectives x sizes x dtypes x backends x 2..N workers (seeds 000-003).
# LINK=<tc rate>: each job across emulated hosts, one worker per host (root), as from several
# nodes; the fit is written as conf/network/emulated-<LINK>.yaml, which the predictor then uses.
# CLUSTER=slurm PARTITION=p: every job in one Slurm job, one rank per node of yours; the fit is
# written as conf/network/slurm-<PARTITION>.yaml (NETWORK=slurm-<PARTITION> for make predict).
# It needs as many nodes as the largest measurement has ranks (the default WORKERS=3 with the groups
# and ps modes: 4; WORKERS=2 CB_MODE=sizes: 2). TIME_MIN=<minutes> (60), SBATCH='account=p qos=q'.
# CB_POOL=1: fit the network from this session's records and every earlier one in $(RESULTS) measured
# in the same place (this host, or the same LINK), which steadies a calibration one session's noise moves.
# A size whose calls are slow gets fewer than ITERS (100) timed calls, about SECONDS_PER_SIZE (2) s
# of them, at least 3 (SECONDS_PER_SIZE=0: always ITERS); so do the fusion and ps modes' slow rounds.
CB_WORKERS  := $(if $(filter command line,$(origin WORKERS)),$(WORKERS),3)
BACKENDS    ?= auto
COLLECTIVES ?= all_reduce
DTYPES      ?= fp32,fp16
MAX_BYTES   ?= 64MiB
CB_MODE     ?= sizes,groups,fusion,ps
FUSION_MODELS ?= resnet50,bert-base
DEVICES     ?= cpu
commbench: install
	$(PY) -m ddlbench.commbench --workers $(CB_WORKERS) --backends $(BACKENDS) --collectives $(COLLECTIVES) \
		--dtypes $(DTYPES) --devices $(DEVICES) --max-bytes $(MAX_BYTES) $(if $(ITERS),--iters $(ITERS)) \
		$(if $(SECONDS_PER_SIZE),--seconds-per-size $(SECONDS_PER_SIZE)) --mode $(CB_MODE) --results $(RESULTS) \
		--fusion-models $(FUSION_MODELS) $(if $(FUSION_PACE_MS),--fusion-pace-ms $(FUSION_PACE_MS)) \
		$(if $(LINK),--link $(LINK)) $(if $(CB_POOL),--pool) $(if $(filter slurm,$(CLUSTER)),--slurm $(if $(PARTITION),--partition $(PARTITION)) \
		$(if $(TIME_MIN),--time-min $(TIME_MIN)) $(foreach o,$(SBATCH),--sbatch $(o)))

clean:
	rm -rf $(VENV) .pytest_cache
