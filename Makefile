# ddlbench: `make test` sets everything up and runs the tests; `make reproduce` runs the study's
# methods on this machine and prints the results table. Variables below; see README.md.
PYTHON   ?= python3
VENV     ?= .venv
PY       := $(VENV)/bin/python
# torch 2.13.0 is a CPU build on CI and dev machines here; on a GPU cluster set TORCH_SPEC to the
# torch you want (pyproject.toml only asks for torch>=2.1).
TORCH_SPEC ?= torch==2.13.0

METHOD   ?= all
WORKERS  ?= 2
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

comma := ,
ALL_METHODS := bsp-ps,bsp-a2a,wfbp-ps,wfbp-a2a,mg-wfbp,bytescheduler-ps,bytescheduler-a2a,ddp
# Horovod runs the all-reduce methods; its own DistributedOptimizer is the reference there.
HVD_METHODS := bsp-a2a,wfbp-a2a,mg-wfbp,bytescheduler-a2a,horovod
all_methods := $(if $(filter horovod,$(ENGINE)),$(HVD_METHODS),$(ALL_METHODS))
methods  := $(if $(filter all,$(METHOD)),$(all_methods),$(METHOD))
# CLUSTER=slurm submits batch jobs; locally Horovod starts with horovodrun, the rest with torchrun.
LAUNCHER ?= $(if $(filter slurm,$(CLUSTER)),slurm,$(if $(filter horovod,$(ENGINE)),horovodrun,local))
PARTITION ?=
GPUS_PER_NODE ?=
cluster_args := engine=$(ENGINE) launcher=$(LAUNCHER) $(if $(DRY_RUN),launcher.dry_run=true) \
	$(if $(PARTITION),launcher.partition=$(PARTITION)) $(if $(GPUS_PER_NODE),launcher.workers_per_node=$(GPUS_PER_NODE))
run_args := model=$(MODEL) profile=$(PROFILE) results_dir=$(RESULTS) $(cluster_args) \
	$(if $(WARMUP),profile.warmup_iters=$(WARMUP)) $(if $(ITERS),profile.measured_iters=$(ITERS)) \
	$(if $(REPEATS),profile.repeats=$(REPEATS)) $(OVERRIDES)

.PHONY: install horovod test reproduce reproduce-paper bench summary figures commbench predict clean

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

# The tests build Horovod first so its tests run; if the build fails they skip and say why.
test: install
	@$(MAKE) --no-print-directory horovod || echo "*** Horovod did not build: its tests will skip (see the output above)"
	$(PY) -m pytest -q tests

# The methods at WORKERS workers, then (once per setup) one worker for the speedup, then the table.
# METHOD=auto: per worker count, the method predicted fastest (ddlbench.predict.auto prints which
# and why), run with the prediction kept in its record. NETWORK=... overrides the cluster's network.
LINK     ?=
PROFILE_FROM ?=
auto_args = --model $(MODEL) --profile $(PROFILE) --cluster $(CLUSTER) $(if $(LINK),--link $(LINK)) \
	$(if $(filter command line environment,$(origin NETWORK)),--network $(NETWORK)) $(if $(PROFILE_FROM),--profile-from $(PROFILE_FROM))
reproduce: install
	@status=0; \
	if [ "$(METHOD)" = auto ]; then \
		for w in $(subst $(comma), ,$(WORKERS)); do \
			choice=$$($(PY) -m ddlbench.predict.auto $(auto_args) --workers $$w) || exit 2; \
			$(PY) -m ddlbench $${choice%% *} "$${choice#* }" workers=$$w $(run_args) || status=$$?; \
		done; \
	else \
		$(PY) -m ddlbench --multirun method=$(methods) workers=$(WORKERS) $(run_args) || status=$$?; \
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
	@for e in $(EXPERIMENTS); do \
		$(PY) -m ddlbench experiment=$$e $(paper_args) || exit $$?; \
		$(PY) -m ddlbench method=bsp-a2a workers=1 model=$${e#*-} profile=study device=cuda skip_recorded=true \
			$(paper_args) || exit $$?; \
	done

# Predicted samples/s of every method at WORKERS on NETWORK (conf/network/), appended to
# $(RESULTS)/predictions.jsonl as "kind": "predicted" records, never read as measurements.
NETWORK  ?= 100gbib
predict: install
	$(PY) -m ddlbench.predict --model $(MODEL) --workers $(WORKERS) --network $(NETWORK) --results $(RESULTS) \
		$(if $(filter-out all auto,$(METHOD)),--methods $(METHOD)) $(if $(PROFILE_FROM),--profile-from $(PROFILE_FROM))

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

# Communication backends: collectives x sizes x dtypes x backends x 2..N workers (seeds 000-003).
CB_WORKERS  := $(if $(filter command line,$(origin WORKERS)),$(WORKERS),3)
BACKENDS    ?= auto
COLLECTIVES ?= all_reduce
DTYPES      ?= fp32,fp16
MAX_BYTES   ?= 64MiB
CB_MODE     ?= sizes,groups,fusion
commbench: install
	$(PY) -m ddlbench.commbench --workers $(CB_WORKERS) --backends $(BACKENDS) --collectives $(COLLECTIVES) \
		--dtypes $(DTYPES) --max-bytes $(MAX_BYTES) $(if $(ITERS),--iters $(ITERS)) --mode $(CB_MODE) --results $(RESULTS)

clean:
	rm -rf $(VENV) .pytest_cache
