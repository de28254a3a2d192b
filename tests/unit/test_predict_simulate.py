"""The predictor's discrete-event model on toy DAGs with hand-computed timelines.

Toy model: three parameters p0, p1, p2 (forward order) of 10,000 elements (40,000 bytes) each;
forward 1 s; backward produces p2, p1, p0. Two workers on one node whose link makes an
all-reduce of 40,000 B take 1 s, 80,000 B 1.5 s, 120,000 B 2 s (2 (alpha + n/2 beta), alpha
0.25 s, beta 1.25e-5 s/B). Fused messages also pay a pack and unpack copy at GPU memory speed
(tens of nanoseconds here), hence approx. The study's stack sends every A2A message through
Horovod's cycle (5 ms); `period` sets it to 0 (each request goes at once) unless a test says, so
the timelines are the schedules' own; the cycle has tests of its own.
"""
import math
import re
from dataclasses import replace

import pytest

from ddlbench.methods.mgwfbp import merge_groups
from ddlbench.predict import network, simulate
from ddlbench.predict.network import Cluster, HostCpu, Link
from ddlbench.predict.profile import Profile

N = 10_000


def toy(ready=(3.0, 2.0, 1.0), need=(0.0, 0.3, 0.6), numels=(N, N, N), update=(0.0, 0.0, 0.0)):
    backward = max(ready)
    order = sorted(range(3), key=lambda i: ready[i])
    return Profile("toy", 1, ["p0", "p1", "p2"], list(numels), 4, [f"p{i}" for i in order], list(ready),
                   list(need), 1.0, backward, list(update), "test", 1.0)


def two_gpus(table=None, server_mem=0.0, g=2, inter=None):
    return Cluster("toy", intra=Link(0.25, 1.25e-5), inter=inter, gpus_per_node=g,
                   server_mem_Bps=server_mem, mgwfbp_table=table or {})


def period(method, prof, cluster, workers=2, **opts):
    opts.setdefault("horovod_cycle_s", 0.0)
    return simulate.simulate(method, prof, cluster, workers, simulate.Options(**opts)).period_s


def test_bsp_communicates_after_backward():
    # forward 1 + backward 3, then one all-reduce of 120,000 B (2 s): 6 s
    assert period("bsp-a2a", toy(), two_gpus()) == pytest.approx(6.0)


def test_a_fused_message_pays_its_devices_pack_and_unpack():
    # The same BSP iteration with copies of 0.1 s per tensor and 120,000 B at 1.2 MB/s (0.2 s a
    # pass of read and write): the pack (3 x 0.1 + 0.2 = 0.5 s) before the all-reduce, the unpack
    # (0.5 s) after it: 7 s. One tensor alone (WFBP) is sent in place: no copy, 5 s as without.
    prof = toy().with_copy(0.1, 1.2e6, "test")
    assert prof.copy_s(120_000, 3) == pytest.approx(0.5) and prof.copy_s(40_000, 1) == 0.0
    assert period("bsp-a2a", prof, two_gpus()) == pytest.approx(7.0)
    assert period("wfbp-a2a", prof, two_gpus()) == pytest.approx(5.0)
    for bad in ((-1.0, 1e9), (0.0, 0.0), (0.0, float("inf"))):
        with pytest.raises(ValueError, match=r"copy cost .* is invalid; accepted: >= 0 s and a finite bandwidth > 0"):
            toy().with_copy(*bad, "test")


def test_compute_after_the_workers_idled_pays_what_the_probe_found_by_hand():
    # The run's compute probe found its steps 0.2 s longer after 1 s of idle, 0.3 s after 4 s.
    # BSP: compute 4 s, then the all-reduce (2 s) while every worker waits: 2 s of idle, on the
    # line from (1, 0.2) to (4, 0.3): 0.2333 s more, 6.2333 s. WFBP (5 s, 1 s of idle): 0.2 s.
    # Half a second of idle: half of (1, 0.2) from (0, 0). One worker never waits: 4 s.
    prof = toy().with_after_idle([(4.0, 0.3), (1.0, 0.2)])
    assert prof.after_idle == [(1.0, 0.2), (4.0, 0.3)]
    assert prof.idle_extra_s(0.5) == pytest.approx(0.1) and prof.idle_extra_s(9.0) == pytest.approx(0.3)
    assert prof.idle_extra_s(0.0) == 0.0 and toy().idle_extra_s(2.0) == 0.0
    assert period("bsp-a2a", prof, two_gpus()) == pytest.approx(6.0 + 0.2 + 0.1 / 3)
    assert period("wfbp-a2a", prof, two_gpus()) == pytest.approx(5.2)
    assert period("bsp-a2a", prof, two_gpus(), workers=1) == pytest.approx(4.0)
    assert simulate.simulate("bsp-a2a", prof, two_gpus(), 2).compute_s == pytest.approx(4.0)
    for bad in ([(0.0, 0.1)], [(1.0, -0.1)], [(1.0, 0.1), (1.0, 0.2)], [(float("inf"), 0.1)]):
        with pytest.raises(ValueError, match=r"after-idle points .* are invalid; accepted: distinct idle seconds > 0"):
            toy().with_after_idle(bad)


def test_a_wait_the_messages_cpu_fills_is_no_idle():
    """Workers on one machine's 2 cores, each all-reduce 0.5 s of every worker's CPU (commbench's
    fusion bursts): while they wait for their messages, the cores run them, and only the rest
    of the wait is idle after which the probe's compute comes back slower (0.2 s after 1 s, 0.3
    s after 4 s). BSP: compute 4 s, its one all-reduce [4, 6]: 2 workers x 0.5 s / 2 cores of
    that wait busy, 1.5 s idle: 0.2 + 0.1 x 0.5 / 3 more. WFBP (6 s, its backward 1 s longer
    for the first two all-reduces' CPU, `test_all_reduces_during_backward_take_the_shared_cores_
    from_it`): 3 x 0.5 s busy of 2 s, 0.5 s idle: 0.1 more. A message of 2 s of CPU fills BSP's
    whole wait: nothing more. Without the shared cores, the whole wait counts (6.2333 s)."""
    alone = Cluster("toy", intra=None, inter=Link(0.25, 1.25e-5), gpus_per_node=1)
    shared = replace(alone, host_cpu=HostCpu(cores=2, s_per_message=0.0,
                                             allreduce={2: {"s_per_message": 0.5, "s_per_byte": 0.0}}))
    prof = toy().with_after_idle([(1.0, 0.2), (4.0, 0.3)])

    def busy(method, workers=2, **opts):
        o = simulate.Options(**opts)
        plan = simulate.plan_for(method, prof, shared, workers, o)
        return simulate.messages_cpu_s(plan, prof, shared, workers, o, simulate.method_config(method))
    assert period("bsp-a2a", prof, alone) == pytest.approx(6.0 + 0.2 + 0.1 / 3)
    assert busy("bsp-a2a") == pytest.approx(0.5)
    assert period("bsp-a2a", prof, shared) == pytest.approx(6.0 + 0.2 + 0.1 * 0.5 / 3)
    assert busy("wfbp-a2a") == pytest.approx(1.5)
    assert period("wfbp-a2a", prof, shared) == pytest.approx(6.0 + 0.1)
    # the runtime's launch from each gradient's hook is CPU too: 0.25 s more a message, 0.75 s
    # more busy, so WFBP's wait is all busy
    assert busy("wfbp-a2a", stack="ddlbench", launch_s=0.25) == pytest.approx(2.25)
    full = replace(shared, host_cpu=replace(shared.host_cpu, allreduce={2: {"s_per_message": 2.0, "s_per_byte": 0.0}}))
    assert period("bsp-a2a", prof, full) == pytest.approx(6.0)
    assert busy("bsp-a2a", 1) == 0.0


def test_a_collective_after_compute_pays_what_commbench_found_then():
    # Cluster.after_compute_s 0.5 s at 2 ranks: BSP's one all-reduce after backward [4, 6.5]:
    # 6.5 s. WFBP's first (p2 at 2) pays it, [2, 3.5]; p1 and p0 find the stream busy or just
    # freed and do not: [3.5, 4.5], [4.5, 5.5]. At 3 ranks nothing was measured: nothing added.
    cluster = replace(two_gpus(), measured_algorithm="ring", after_compute_s={2: 0.5})
    assert period("bsp-a2a", toy(), cluster, algorithm="ring") == pytest.approx(6.5)
    assert period("wfbp-a2a", toy(), cluster, algorithm="ring") == pytest.approx(5.5)
    # gradients 2 s apart: the stream idles 1 s before each of the next two, which pay it too
    spaced = toy(ready=(5.0, 3.0, 1.0))
    assert period("wfbp-a2a", spaced, cluster, algorithm="ring") == pytest.approx(1 + 5 + 1.5)
    assert period("wfbp-a2a", spaced, replace(cluster, after_compute_s={3: 0.5}), algorithm="ring") == \
        pytest.approx(1 + 5 + 1)


def test_wfbp_overlaps_backward():
    # p2 ready at 2 -> [2, 3]; p1 at 3 -> [3, 4]; p0 at 4 -> [4, 5]
    assert period("wfbp-a2a", toy(), two_gpus()) == pytest.approx(5.0)


def test_a_step_begun_late_delays_its_gradients():
    # the last worker began 2 s late (shared cores): forward [0, 3], backward [3, 6], p2, p1, p0
    # ready at 4, 5, 6 -> [4, 5], [5, 6], [6, 7]: 7 s, the 5 s iteration 2 s later; BSP's 6 s too
    late = toy().started_late(2.0)
    assert (late.forward_s, late.need_s, late.ready_s) == (3.0, [2.0, 2.3, 2.6], [3.0, 2.0, 1.0])
    assert late.compute_s == pytest.approx(6.0)
    assert period("wfbp-a2a", late, two_gpus()) == pytest.approx(7.0)
    assert period("bsp-a2a", late, two_gpus()) == pytest.approx(8.0)
    with pytest.raises(ValueError, match=r"start delay -1.0 s is invalid; accepted: a finite number >= 0"):
        toy().started_late(-1.0)


def test_wfbp_queues_on_one_stream():
    # p2, p1, p0 ready at 1.5, 1.6, 1.7 (forward 1 + 0.5, 0.6, 0.7): each waits for the one before:
    # [1.5, 2.5], [2.5, 3.5], [3.5, 4.5]; backward ended at 1.7 long before
    assert period("wfbp-a2a", toy(ready=(0.7, 0.6, 0.5)), two_gpus()) == pytest.approx(4.5)


def test_mgwfbp_merges_and_beats_wfbp_where_gradients_come_close():
    prof = toy(ready=(1.5, 1.2, 1.0))   # t_b = 1.0, 0.2, 0.3 in ready order
    cluster = two_gpus(table={2: (0.5, 1e-9)})  # the study's way: alpha from a table by workers
    # waits of 0.2 and 0.3 are under alpha 0.5: one group, launched at 2.5, 2 s: 4.5
    assert period("mg-wfbp", prof, cluster) == pytest.approx(4.5)
    # WFBP: [2, 3], [3, 4], [4, 5]
    assert period("wfbp-a2a", prof, cluster) == pytest.approx(5.0)


def test_mgwfbp_groups_are_the_runtimes_for_the_same_profile():
    prof = toy(ready=(3.0, 1.2, 1.0))
    cluster = two_gpus(table={2: (0.5, 1e-9)})
    plan = simulate.plan_for("mg-wfbp", prof, cluster, 2, simulate.Options())
    order = prof.ready_order()
    runtime = merge_groups(prof.tb_s(), [prof.tensor_bytes[i] for i in order], 0.5, 1e-9,
                           [prof.numels[i] for i in order], 8192)
    assert plan.messages == [[order[j] for j in g] for g in runtime] == [[2, 1], [0]]


def test_mgwfbp_small_groups_always_merge_as_in_the_study():
    prof = toy(numels=(1000, 1000, 1000))  # under the 8,192-element rule: one group
    plan = simulate.plan_for("mg-wfbp", prof, two_gpus(table={2: (0.0, 1e-9)}), 2, simulate.Options())
    assert plan.messages == [[2, 1, 0]]


def test_mgwfbp_fit_times_the_runtimes_microbenchmark_through_the_links_token_bucket():
    # 2 machines of 1 GPU, Gloo's ring: an all-reduce of n bytes takes 2 alpha + n beta and sends
    # n bytes through each link direction, whose bucket holds 1,000 B. Alpha 1 ms, beta 1 us/B:
    # the barrier before each call (2.004 ms) refills the bucket, so every call of 500 B takes
    # 2.5 - 0.5 = 2 ms and of 5,000 B 7 - 1 = 6 ms, not the 2.5 and 7 the link's line gives
    bucket = Cluster("toy", intra=None, inter=Link(0.001, 1e-6, burst_bytes=1000), gpus_per_node=1)
    assert simulate.microbenchmark_s(bucket, 2, [500, 5000], 2, "ring") == pytest.approx([0.002, 0.006])
    # a real link (no bucket) gives the line
    line = Cluster("toy", intra=None, inter=Link(0.001, 1e-6), gpus_per_node=1)
    assert simulate.microbenchmark_s(line, 2, [500, 5000], 2, "ring") == pytest.approx([0.0025, 0.007])
    # alpha 0: barriers of 4 us refill 4 B, so back-to-back calls drain it. Calls of 500 B:
    # 0 (1,000 tokens), 0 (504 left), then 8 and 4 tokens: 0.5 - 0.008 and 0.5 - 0.004 ms;
    # the median of the 3 timed (after one untimed): 0.492 ms
    drained = Cluster("toy", intra=None, inter=Link(0.0, 1e-6, burst_bytes=1000), gpus_per_node=1)
    assert simulate.microbenchmark_s(drained, 2, [500], 3, "ring") == pytest.approx([0.000492])
    # Gloo's barrier is a dissemination barrier of empty messages: with alpha 0 it refills
    # nothing, so the third and fourth calls find (almost) no tokens: 0.5 ms
    assert simulate.microbenchmark_s(drained, 2, [500], 3, "ring", gloo=True) == pytest.approx([0.0005], rel=1e-3)
    # with alpha 1 ms it takes 1 ms (one round at 2 ranks), which refills the bucket
    assert simulate.microbenchmark_s(bucket, 2, [500, 5000], 2, "ring", gloo=True) == pytest.approx([0.002, 0.006])
    # a bucket deep enough for every call on a link of no start-up: no call takes 0 s, which the
    # relative fit could not take
    deep = Cluster("toy", intra=None, inter=Link(0.0, 1e-9, burst_bytes=10**9), gpus_per_node=1)
    assert min(simulate.microbenchmark_s(deep, 2, [100, 200], 1, "ring", gloo=True)) > 0
    assert simulate.mgwfbp_alpha_beta(deep, 2, simulate.method_config("mg-wfbp"),
                                      simulate.Options(stack="ddlbench", backend="gloo"))[1] == 0.0
    # what MG-WFBP then decides with: the runtime's fit of those times, not of the line's
    opts, cfg = simulate.Options(stack="ddlbench", backend="gloo"), simulate.method_config("mg-wfbp")
    a, b = simulate.mgwfbp_alpha_beta(bucket, 2, cfg, opts)
    sizes = simulate.bench_sizes(cfg["bench_min_bytes"], cfg["bench_max_bytes"])
    times = simulate.microbenchmark_s(bucket, 2, sizes, cfg["bench_reps"], "ring")
    assert (a, b) == pytest.approx(simulate.fit_alpha_beta(sizes, times))
    assert (a, b) != pytest.approx(simulate.fit_alpha_beta(sizes, [bucket.allreduce_s(n, 2, "ring") for n in sizes]))


def test_a_runs_own_mgwfbp_alpha_beta_decide_its_groups():
    # the validation predicts a recorded run with the alpha, beta its start-up fit chose
    prof = toy(ready=(1.5, 1.2, 1.0))
    cluster = two_gpus(table={2: (0.5, 1e-9)})
    assert simulate.plan_for("mg-wfbp", prof, cluster, 2, simulate.Options()).messages == [[2, 1, 0]]
    own = simulate.Options(mgwfbp_alpha_beta=(0.0, 1e-9))  # alpha 0: nothing merges (10,000 >= 8,192)
    assert simulate.plan_for("mg-wfbp", prof, cluster, 2, own).messages == [[2], [1], [0]]
    with pytest.raises(ValueError, match=r"mgwfbp_alpha_beta=\(-1\.0, 1e-09\) is invalid; accepted"):
        simulate.Options(mgwfbp_alpha_beta=(-1.0, 1e-9))


def test_a_runs_own_mgwfbp_groups_are_timed_as_it_sent_them():
    # the run's record lists its groups as bytes in send order; the prediction of that run times
    # those: here 80,000 B (p2 then p1, the ready order) and 40,000 B (p0), where the merge rule
    # at alpha 0.5 s sends one group of all three
    prof = toy(ready=(1.5, 1.2, 1.0))
    cluster = two_gpus(table={2: (0.5, 1e-9)})
    sent = simulate.Options(mgwfbp_group_bytes=(2 * 4 * N, 4 * N))
    assert simulate.plan_for("mg-wfbp", prof, cluster, 2, simulate.Options()).messages == [[2, 1, 0]]
    assert simulate.plan_for("mg-wfbp", prof, cluster, 2, sent).messages == [[2, 1], [0]]
    assert period("mg-wfbp", prof, cluster, mgwfbp_group_bytes=(2 * 4 * N, 4 * N)) == pytest.approx(
        simulate.simulate("mg-wfbp", prof, cluster, 2, simulate.Options(horovod_cycle_s=0.0),
                          simulate.Plan([[2, 1], [0]])).period_s)
    assert period("mg-wfbp", prof, cluster, mgwfbp_group_bytes=(2 * 4 * N, 4 * N)) != pytest.approx(
        period("mg-wfbp", prof, cluster))
    # groups that do not partition the gradients in their ready order: another model's, a group
    # cut inside a tensor, too few bytes, too many
    for bad in ((4 * N + 1, 2 * 4 * N - 1), (4 * N,), (3 * 4 * N, 1), (4 * N, 0, 2 * 4 * N)):
        with pytest.raises(ValueError, match=r"MG-WFBP groups \[.*\] \(bytes, in send order\) do not partition "
                                             r"toy's 3 gradients \(120000 B\) in their ready order; accepted"):
            simulate.run_groups(prof, bad)
    for bad in ((), (0, 4 * N), (1.5,), "12"):
        with pytest.raises(ValueError, match=r"mgwfbp_group_bytes=.* is invalid; accepted: bytes per group in send "
                                             r"order \(whole numbers > 0\), or None"):
            simulate.Options(mgwfbp_group_bytes=bad)


def test_ddp_broadcasts_the_modules_buffers_before_every_forward():
    # DDP (broadcast_buffers, its default) sends rank 0's buffers before each forward: two
    # buckets (two dtypes) of 40,000 and 8 B on GPUs of one node (alpha 0.25 s, 1.25e-5 s/B).
    # NCCL, one after another by its chain: 2 GPUs (0.25 + 0.5) + (0.25 + 1e-4) = 1.0001 s;
    # 4 GPUs (3 x 0.25 + 0.5) + (3 x 0.25 + 1e-4) = 2.0001 s. Gloo runs both at once by its
    # binomial tree, one start-up per round: 2 GPUs 0.25 + 0.5001 = 0.7501 s, 4 GPUs twice that
    from dataclasses import replace

    prof, buffers = toy(), replace(toy(), buffer_bytes=[40_000, 8])
    for workers, gloo, nccl in ((2, 0.7501, 1.0001), (4, 1.5002, 2.0001)):
        cluster = two_gpus(g=4)
        for backend, extra in (("gloo", gloo), ("nccl", nccl)):
            bare = period("ddp", prof, cluster, workers, backend=backend)
            assert period("ddp", buffers, cluster, workers, backend=backend) == pytest.approx(bare + extra)
    # all-reduce methods other than DDP do not
    assert period("bsp-a2a", buffers, two_gpus()) == period("bsp-a2a", prof, two_gpus())
    # where commbench found what a collective costs right after compute (0.3 s at 2 ranks), Gloo's
    # broadcast, which starts right after the update, pays it once; NCCL's, measured by no such
    # round, does not
    after = replace(two_gpus(g=4), after_compute_s={2: 0.3})
    bare = period("ddp", prof, after, 2, backend="gloo")
    assert period("ddp", buffers, after, 2, backend="gloo") == pytest.approx(bare + 0.7501 + 0.3)
    assert period("ddp", buffers, after, 2, backend="nccl") - period("ddp", prof, after, 2, backend="nccl") == \
        pytest.approx(1.0001)


def test_profiles_record_the_buffers_ddp_broadcasts(tmp_path):
    import json
    from dataclasses import asdict

    import torch

    from ddlbench.predict import profile

    net = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3))
    # running_mean and running_var (fp32, 12 B each), num_batches_tracked (int64, 8 B)
    assert profile.buffer_buckets(net) == [24, 8]
    assert profile.buffer_buckets(torch.nn.Linear(3, 3)) == []
    # a profile cached before buffers were recorded is made again, not read as having none
    cached = tmp_path / "p.json"
    fields = asdict(toy())
    cached.write_text(json.dumps(fields))
    assert profile._read_cached(cached) == toy()
    del fields["buffer_bytes"]
    cached.write_text(json.dumps(fields))
    assert profile._read_cached(cached) is None


def test_bytescheduler_credit_and_overlap_with_the_next_forward():
    # One partition per tensor (4,000,000 params each); credit 16,000,000 never binds here.
    # p0 is needed late in forward (0.9 s in), p2 first. Iteration 1: backward [1, 4]; p2 [2, 3],
    # p1 [3, 4], p0 [4, 5]. The next forward starts when backward ends (4): p2 needed at 4.0
    # (landed 3), p1 at 4.3 (landed 4), p0 at 4.9 waits until 5; forward ends 5.1, backward to 8.1.
    # Steady state: 4.1 s per iteration, where WFBP waits for everything: 5 s.
    # (Stack ddlbench: this runtime's queue straight onto the stream, no Horovod cycle.)
    prof = toy(need=(0.9, 0.3, 0.0))
    assert period("bytescheduler-a2a", prof, two_gpus(), stack="ddlbench") == pytest.approx(4.1)
    assert period("wfbp-a2a", prof, two_gpus()) == pytest.approx(5.0)



def test_bytescheduler_a2a_leader_tells_each_choice_before_it_launches_by_hand():
    # The toy above, with this runtime's leader taking 0.5 s a choice (commbench's ordered round,
    # Cluster.order_s): p2 ready at 2 is told until 2.5 and runs [2.5, 3.5], p1 (ready 3, the
    # leader free) [3.5, 4.5], p0 [4.5, 5.5]. The next forward from 4: p2's piece [4, 4.3], p1's
    # waits for 4.5 [4.5, 5.1], p0's for 5.5 [5.5, 5.6]; the backward to 8.6: 4.6 s per iteration.
    prof = toy(need=(0.9, 0.3, 0.0))
    told = replace(two_gpus(), order_s={2: 0.5})
    assert period("bytescheduler-a2a", prof, told, stack="ddlbench") == pytest.approx(4.6)
    # 2.5 s a message: p2 told until 4.5 runs [4.5, 5.5]; p1 and p0 queued meanwhile go in one
    # message, the more urgent first: told until 7, p0 [7, 8], p1 [8, 9]. The forward from 4:
    # p2's piece [5.5, 5.8], p1's [9, 9.6], p0's [9.6, 9.7]; the backward to 12.7: 8.7 s (a
    # message per partition would tell p1 until 9.5 and run it [9.5, 10.5]: 10.2 s)
    slow = replace(two_gpus(), order_s={2: 2.5})
    assert period("bytescheduler-a2a", prof, slow, stack="ddlbench") == pytest.approx(8.7)
    # the leader's choices at another worker count, the study's Horovod (no leader) and a PS
    # method (each machine schedules its own) are as before
    assert period("bytescheduler-a2a", prof, replace(told, order_s={4: 0.5}), stack="ddlbench") == pytest.approx(4.1)
    assert period("bytescheduler-a2a", prof, told, stack="study") == period("bytescheduler-a2a", prof, two_gpus(),
                                                                           stack="study")
    wire = Link(0.25, 1.25e-5)
    assert period("bytescheduler-ps", prof, replace(told, inter=wire), stack="ddlbench", bytescheduler_ps="worker") \
        == period("bytescheduler-ps", prof, two_gpus(inter=wire), stack="ddlbench", bytescheduler_ps="worker")


def test_order_s_is_the_choice_time_at_which_the_ordered_round_takes_its_measured_time_by_hand():
    # Three 1 s all-reduces, one at a time, the k-th launched at (k + 1) s: up to s = 1 the
    # stream is never idle after the first launch, so the round takes s + 3; beyond, 3 s + 1.
    assert simulate.order_s([1.0] * 3, 3.5, 2, None) == pytest.approx(0.5)
    assert simulate.order_s([1.0] * 3, 7.0, 2, None) == pytest.approx(2.0)
    assert simulate.order_s([1.0] * 3, 2.5, 2, None) == 0.0  # the all-reduces alone take longer


def test_bytescheduler_updates_share_the_device_with_forward_and_backward():
    # The overlap case above with 0.1 s per update. Updates launch as their all-reduces land (p2
    # 3, p1 4, p0 5) but queue behind the backward (to 4); then, in issue order on the device:
    # p2's update [4, 4.1], p1's [4.1, 4.2], forward p2's piece [4.2, 4.5] and p1's [4.5, 5.1]
    # (issued at 4, its update launched), p0's update [5.1, 5.2], p0's piece [5.2, 5.3]: the
    # backward from 5.3, and so every iteration: 4.3 s, the compute (1 + 3 + 0.3), none of the
    # updates hidden. Updates that ran beside the compute for free would give 4.2 s (p0's
    # update [5, 5.1], its piece from 5.1).
    prof = toy(need=(0.9, 0.3, 0.0), update=(0.1, 0.1, 0.1))
    assert period("bytescheduler-a2a", prof, two_gpus(), stack="ddlbench") == pytest.approx(4.3)
    updated = [0.0] * 3
    end = simulate.forward_with_updates(prof, [2, 1, 0], 4.0, [(3.0, 2), (4.0, 1), (5.0, 0)], updated)
    assert end == pytest.approx(5.3) and updated == pytest.approx([5.2, 4.2, 4.1])
    # a piece is issued after the one before it: p1's update launched late (6) holds p0's piece too
    end = simulate.forward_with_updates(prof, [2, 1, 0], 4.0, [(3.0, 2), (6.0, 1), (3.5, 0)], updated)
    assert updated == pytest.approx([4.2, 6.1, 4.1]) and end == pytest.approx(6.1 + 0.6 + 0.1)


def test_bytescheduler_credit_lets_the_first_layer_overtake(monkeypatch):
    # Gradients p2, p1, p0 appear at 2.0, 2.1, 2.2 (forward 1, backward 1.2). Credit of 1
    # parameter: p2 goes at 2 and holds the credit; when it lands at 3 the most urgent queued
    # partition, p0, overtakes p1: p0 [3, 4], p1 [4, 5]. Next forward from 2.2: p0 (needed at 0)
    # waits until 4, p1 (needed 0.3 s later) until 5: forward ends 5.7, the next backward 6.9:
    # 4.7 s per iteration. Without the credit bound all three queue on the stream in arrival
    # order, p0 lands last at 5, and the forward ends 6.0: 5.0 s.
    prof = toy(ready=(1.2, 1.1, 1.0), need=(0.0, 0.3, 0.6))
    cfg = simulate.method_config("bytescheduler-a2a")
    opts = simulate.Options(stack="ddlbench")
    monkeypatch.setattr(simulate, "method_config", lambda name, variant="byteps": {**cfg, "credit_params": 1})
    assert simulate.simulate("bytescheduler-a2a", prof, two_gpus(), 2, opts).period_s == pytest.approx(4.7)
    monkeypatch.setattr(simulate, "method_config", lambda name, variant="byteps": cfg)
    assert simulate.simulate("bytescheduler-a2a", prof, two_gpus(), 2, opts).period_s == pytest.approx(5.0)


def test_horovod_cycle_waits_for_the_boundary_and_fuses_what_fits():
    # Cycle 1 s, fusion buffer 80,000 B; 2-rank ring on two_gpus: 40,000 B take 1.0 s, 80,000 B 1.5 s.
    # Requests a 0.2, b 0.5, c 0.7 (40,000 B each), d 1.5. Boundary 1.0: [a, b] fused (80,000 B
    # fit) on the stream 1.0-2.5 (plus the copy in and out), then [c] 2.5-3.5; d waits for the 2.0
    # boundary and then for the stream: 3.5-4.5.
    sim = simulate.Sim()
    cluster = two_gpus()
    h = simulate.HorovodCycle(sim, simulate.AllReduceComm(sim, cluster, 2, "ring"), cycle_s=1.0, fusion_bytes=80_000)
    done = {}
    for name, t in (("a", 0.2), ("b", 0.5), ("c", 0.7), ("d", 1.5)):
        sim.at(t, h.send, 40_000, 0.0, lambda name=name: done.setdefault(name, sim.now))
    sim.run()
    copy = 2 * 80_000 / simulate.GPU_MEM_BPS
    assert done == pytest.approx({"a": 2.5 + copy, "b": 2.5 + copy, "c": 3.5 + copy, "d": 4.5 + copy})


def test_the_studys_bytescheduler_a2a_goes_through_horovods_cycle():
    # The same toy as above with the study's stack: every partition waits for a 5 ms boundary, so
    # the iteration is longer than the runtime's by at least one cycle's wait and at most a few.
    prof = toy(need=(0.9, 0.3, 0.0))
    study = period("bytescheduler-a2a", prof, two_gpus(), stack="study", horovod_cycle_s=simulate.HOROVOD_CYCLE_S)
    assert 4.1 < study <= 4.1 + 3 * simulate.HOROVOD_CYCLE_S
    assert simulate.Options().horovod_cycle_s == simulate.HOROVOD_CYCLE_S  # the study's default
    with pytest.raises(ValueError, match=r"horovod_cycle_s=-1 is invalid; accepted: >= 0 seconds"):
        simulate.Options(horovod_cycle_s=-1)


def test_the_studys_wfbp_a2a_bsp_a2a_and_mgwfbp_skip_horovods_cycle_and_fusion():
    # The study's own optimizer calls Horovod's allreduce_async_ per group, and its benchmark
    # scripts (mgwfbp/imagenet_benchmark.py, bert_benchmark.py) set HOROVOD_FUSION_THRESHOLD=0 and
    # HOROVOD_CYCLE_TIME=0 before Horovod starts: each request goes at once, alone, even where
    # Horovod's cycle (here 1 s) would have held and fused them. WFBP-A2A's p2, p1, p0 appear at
    # 1.5, 1.6, 1.7 and queue on the stream one at a time: 4.5 s, as this runtime's WFBP-A2A
    # (test_wfbp_queues_on_one_stream); fused at the 2.0 boundary they would end at 4.0 s.
    prof = toy(ready=(0.7, 0.6, 0.5))
    assert period("wfbp-a2a", prof, two_gpus(), horovod_cycle_s=1.0) == pytest.approx(4.5)
    assert period("wfbp-a2a", prof, two_gpus(), stack="ddlbench", horovod_cycle_s=1.0) == pytest.approx(4.5)
    # BSP-A2A's one message leaves as backward ends (4.5), not at the 5.0 boundary: 2 s (120,000 B)
    late = toy(ready=(3.5, 2.0, 1.0))
    assert period("bsp-a2a", late, two_gpus(), horovod_cycle_s=1.0) == pytest.approx(1.0 + 3.5 + 2.0, rel=1e-4)
    # MG-WFBP's one group (test_mgwfbp_merges_and_beats_wfbp_where_gradients_come_close) leaves
    # at 2.5, not at the 3.0 boundary: 4.5 s
    assert period("mg-wfbp", toy(ready=(1.5, 1.2, 1.0)), two_gpus(table={2: (0.5, 1e-9)}),
                  horovod_cycle_s=1.0) == pytest.approx(4.5, rel=1e-4)


def test_every_algorithm_simulates_every_method_on_one_node():
    # `--algorithm tree` on one node used to time every all-reduce as infinite and crash
    for algorithm in ("nccl", "nccl-2.4", "ring", "tree", "hierarchical"):
        for method in simulate.METHODS:
            assert 3.0 < period(method, toy(), two_gpus(), algorithm=algorithm) < 30.0
    with pytest.raises(ValueError, match="algorithm='nccl-2.5' is unknown; accepted: nccl, nccl-2.4"):
        simulate.Options(algorithm="nccl-2.5")


def test_ps_with_two_servers_by_hand():
    # 2 machines of 1 GPU (no node stage); inter link alpha 0, beta 1e-5 s/B; 2 servers.
    # BSP-PS: one message of 120,000 B in one partition (4,096,000-byte partitions) on one server:
    # push: each machine's uplink 1.2 s, the server's downlink takes both machines' (2.4 s);
    # pull: server uplink 2.4 s (both machines), cut through to each machine's downlink.
    cluster = Cluster("toy", intra=None, inter=Link(0.0, 1e-5), gpus_per_node=1)
    assert period("bsp-ps", toy(), cluster) == pytest.approx(4.0 + 2.4 + 2.4, rel=1e-6)
    # WFBP-PS: three messages of 40,000 B; keys 0, 1, 2 go to servers by djb2: p2 (ready 2),
    # p1 (3), p0 (4); each push 0.8 s on its server's downlink, each pull 0.8 s on its uplink.
    from ddlbench.methods.ps import plan
    servers = [ps[0].server for ps in plan([N, N, N], 4, 4096000, 2)]
    t = simulate.simulate("wfbp-ps", toy(), cluster, 2, simulate.Options())
    # by hand, per server FIFO: message g launched at 2 + g, push [2+g, 2.8+g] unless its server is
    # busy, pull right after; the last message (launched at 4) ends at 4 + 0.8 + 0.8 = 5.6 when its
    # server is idle by then, which holds whatever the assignment (earlier messages end by 5.6 - 1).
    assert servers and t.period_s == pytest.approx(5.6)


def test_a_ps_round_after_compute_pays_what_commbench_found_then():
    # Cluster.ps_after_compute_s 0.5 s at 2 workers, on test_ps_with_two_servers_by_hand's
    # cluster. BSP-PS's one push after backward (4) pays it: the round ends at 8.8 + 0.5 s.
    cluster = Cluster("toy", intra=None, inter=Link(0.0, 1e-5), gpus_per_node=1, ps_after_compute_s={2: 0.5})
    assert period("bsp-ps", toy(), cluster) == pytest.approx(4.0 + 0.5 + 2.4 + 2.4, rel=1e-6)
    # WFBP-PS, one server (both machines' 40,000 B pushes 0.8 s into it, the pulls 0.8 s out): p2
    # (ready 2) pays it, pushes [2.5, 3.3], pulled [3.3, 4.1]; p1 (3) and p0 (4) find a round in
    # flight and do not: pushed behind it [3.3, 4.1] and [4.1, 4.9], the last pulled [4.9, 5.7].
    # Without the extra: 5.6, the slack between rounds absorbing 0.4 s of it.
    assert period("wfbp-ps", toy(), replace(cluster, ps_after_compute_s={}), servers=1) == pytest.approx(5.6)
    assert period("wfbp-ps", toy(), cluster, servers=1) == pytest.approx(5.7)
    # gradients 2 s apart: each round has ended (1.6 s) and idled 0.4 s, beyond
    # AFTER_COMPUTE_IDLE_S: every push pays it, and the last round ends at 1 + 5 + 0.5 + 1.6
    spaced = toy(ready=(5.0, 3.0, 1.0))
    assert period("wfbp-ps", spaced, cluster, servers=1) == pytest.approx(1 + 5 + 0.5 + 1.6)
    # at 4 workers nothing was measured: nothing added
    assert period("bsp-ps", toy(), replace(cluster, ps_after_compute_s={4: 0.5})) == \
        pytest.approx(4.0 + 2.4 + 2.4, rel=1e-6)
    # the emulated links (PSMachines, each machine on its own clock): each machine's push pays it
    tbf = Cluster("toy", intra=None, inter=Link(0.0, 1e-5, burst_bytes=1), gpus_per_node=1)
    assert period("bsp-ps", toy(), replace(tbf, ps_after_compute_s={2: 0.5})) == \
        pytest.approx(period("bsp-ps", toy(), tbf) + 0.5, rel=1e-4)


def test_server_contention_grows_with_machines():
    one = Cluster("toy", intra=None, inter=Link(0.0, 1e-5), gpus_per_node=1)
    t2 = period("bsp-ps", toy(), one, workers=2, servers=1)
    t4 = period("bsp-ps", toy(), one, workers=4, servers=1)
    assert t4 - t2 == pytest.approx(2 * 2 * 1.2)  # two more machines' pushes and pulls through one server link


def test_a_local_run_is_one_machine_with_one_server():
    # Four workers on this machine (the local launchers), a link of alpha 0 and beta 1e-5 s/B:
    # one node, so BSP-PS reduces inside it (3 steps of 30,000 B + the copy: 1.2 s), its leader
    # pushes 120,000 B once to the one server (1.2 s), pulls once (1.2 s) and broadcasts (1.2 s).
    # Read as four machines of one worker, the one server holding the key would take four
    # pushes and send four pulls (4.8 s each way).
    link = Link(0.0, 1e-5)
    apart = Cluster("toy", intra=None, inter=link, gpus_per_node=1)
    here = network.on_one_machine(apart, 4)
    assert here.nodes(4) == (1, 4) and here.intra == link and apart.nodes(4) == (4, 1)
    assert period("bsp-ps", toy(), here, workers=4, stack="ddlbench") == pytest.approx(4.0 + 4 * 1.2, rel=1e-6)
    assert period("bsp-ps", toy(), apart, workers=4, stack="ddlbench") == pytest.approx(4.0 + 2 * 4.8, rel=1e-6)
    with pytest.raises(ValueError, match="no link between processes; accepted"):
        network.on_one_machine(Cluster("none", intra=None, inter=None, gpus_per_node=1), 2)
    # ps_topology=per-gpu (methods.ps_node): every worker pushes, no node stage: the machine's
    # link carries its 4 pushes (4.8 s) into the server's (4.8 s, cut through), and 4 pulls back
    assert period("bsp-ps", toy(), here, workers=4, stack="ddlbench", ps_topology="per-gpu") == \
        pytest.approx(4.0 + 2 * 4.8, rel=1e-6)
    assert period("bsp-ps", toy(), apart, workers=4, stack="ddlbench", ps_topology="per-gpu") == \
        pytest.approx(4.0 + 2 * 4.8, rel=1e-6)  # one worker a machine: the same as per-machine
    with pytest.raises(ValueError, match="ps_topology='per-node' is unknown; accepted: per-machine, per-gpu"):
        simulate.Options(ps_topology="per-node")
    with pytest.raises(ValueError, match="ps_topology='per-gpu' with stack='study' is invalid.*accepted: per-machine"):
        simulate.Options(stack="study", ps_topology="per-gpu")


def test_per_gpu_ps_pushes_from_every_worker():
    # 2 machines of 2 workers, every link alpha 0, beta 1e-5 s/B; BSP-PS's 120,000 B partition.
    # per-machine: node reduce (60,000 B + its copy: 1.2 s), the 2 leaders' pushes into the
    # server (2.4 s), 2 pulls (2.4 s), broadcast (1.2 s). per-gpu: no node stage; each machine's
    # link carries its 2 workers' pushes (2.4 s), the server's all 4 (4.8 s), and back.
    link = Link(0.0, 1e-5)
    pairs = network.with_nodes(Cluster("toy", intra=None, inter=link, gpus_per_node=1), 2, link, "test")
    assert period("bsp-ps", toy(), pairs, workers=4, stack="ddlbench") == pytest.approx(4.0 + 1.2 + 2.4 + 2.4 + 1.2)
    assert period("bsp-ps", toy(), pairs, workers=4, stack="ddlbench", ps_topology="per-gpu") == \
        pytest.approx(4.0 + 2 * 4.8)
    # 3 workers on nodes of 2: 3 pushers (methods.ps_node: every worker), not 2 x 2
    assert period("bsp-ps", toy(), pairs, workers=3, stack="ddlbench", ps_topology="per-gpu") == \
        pytest.approx(4.0 + 2 * 3.6)
    # on cores that workers and servers share, every pusher's messages cost them CPU: twice as
    # many pushers here
    shared = replace(pairs, host_cpu=HostCpu(cores=2, s_per_message=0.01))
    cfg = simulate.method_config("wfbp-ps")
    cpu = {t: simulate.host_cpu_s(simulate.plan_for("wfbp-ps", toy(), shared, 4, o), toy(), shared, 4, cfg, o)
           for t, o in (("per-machine", simulate.Options(stack="ddlbench")),
                        ("per-gpu", simulate.Options(stack="ddlbench", ps_topology="per-gpu")))}
    assert cpu["per-machine"] > 0 and cpu["per-gpu"] == pytest.approx(2 * cpu["per-machine"])


def test_one_machine_ps_in_the_studys_stack_never_reaches_a_server():
    # BytePS with DMLC_NUM_WORKER=1: node reduce + broadcast only, each 1 step of 60,000 B + copy
    prof = toy()
    study = period("bsp-ps", prof, two_gpus(inter=Link(0.0, 1.0)), stack="study")
    ours = period("bsp-ps", prof, two_gpus(inter=Link(0.0, 1.0)), stack="ddlbench")
    node = 2 * ((0.25 + 60000 * 1.25e-5) + 1.25e-5 * 60000)
    assert study == pytest.approx(4.0 + node)
    assert ours > study + 100_000  # a 1 s/B link to the server


def test_bytescheduler_ps_as_the_study_ran_it_is_wfbp_ps_with_the_server_schedule():
    plan = simulate.plan_for("bytescheduler-ps", toy(), two_gpus(), 2, simulate.Options(bytescheduler_ps="byteps"))
    assert plan.server_schedule and plan.ps and not plan.bytescheduler
    assert plan.messages == simulate.plan_for("wfbp-ps", toy(), two_gpus(), 2, simulate.Options()).messages


def test_one_worker_is_compute_only():
    assert period("mg-wfbp", toy(), two_gpus(), workers=1) == pytest.approx(4.0)


def test_a_token_bucket_link_passes_its_burst_after_idling():
    # the emulated cluster's links are tc token buckets (Link.burst_bytes): 2 machines of 1 GPU,
    # the toy's link, a 40,000-byte bucket. A 2-rank ring sends the whole message each way.
    # BSP: 120,000 B after 4 s idle: 40,000 B pass at once, saving 0.5 s of the 2 s: 1 + 3 + 1.5.
    bucket = Cluster("toy", intra=None, inter=Link(0.25, 1.25e-5, burst_bytes=40_000), gpus_per_node=1)
    assert period("bsp-a2a", toy(), bucket, algorithm="ring") == pytest.approx(5.5)
    # WFBP: 40,000 B at 2, 3 and 4 s; each all-reduce (1 s at the rate) takes 0.5 s, and the 0.5 s
    # idle before the next refills the bucket (40,000 B at 1.25e-5 s/B): [2, 2.5], [3, 3.5], [4, 4.5]
    assert period("wfbp-a2a", toy(), bucket, algorithm="ring") == pytest.approx(4.5)
    # back to back, the bucket is empty after the first: p2, p1, p0 ready at 1.5, 1.6, 1.7:
    # [1.5, 2.0], then the next two at the rate: [2.0, 3.0], [3.0, 4.0]
    assert period("wfbp-a2a", toy(ready=(0.7, 0.6, 0.5)), bucket, algorithm="ring") == pytest.approx(4.0)
    # BSP-PS (alpha 0, beta 1e-5, a 60,000-byte bucket on every link direction; the replies leave
    # one after another, test_ps_replies_leave_one_machine_after_another_on_the_emulated_links_by_hand):
    # a push or reply of 120,000 B takes 1.2 s at the rate, 0.6 s on a full bucket. In the steady
    # state machine 0 pushes 4 s after its start on full buckets (0.6 s) and machine 1, 1.2 s later,
    # on the server downlink's refilled bucket (0.6 s); the server's uplink then replies to machine 0
    # on a full bucket (0.6 s) and at once to machine 1 on an empty one (1.2 s): 4 + 0.6 + 0.6 + 1.2
    ps = Cluster("toy", intra=None, inter=Link(0.0, 1e-5, burst_bytes=60_000), gpus_per_node=1)
    assert period("bsp-ps", toy(), ps) == pytest.approx(6.4, rel=1e-6)
    # 2 workers a machine (GPUS_PER_NODE=2) over a link inside it that costs nothing: a ring of
    # 4 still leaves each machine once each way, so each link direction carries what it does
    # with 4 machines of one, behind the same bucket
    pairs = network.with_nodes(bucket, 2, Link(0.0, 0.0), "test")
    assert pairs.nodes(4) == (2, 2)
    assert period("bsp-a2a", toy(), pairs, workers=4, algorithm="ring") == \
        pytest.approx(period("bsp-a2a", toy(), bucket, workers=4, algorithm="ring"))
    # a real link (no bucket) is as before
    assert period("bsp-a2a", toy(), Cluster("toy", intra=None, inter=Link(0.25, 1.25e-5), gpus_per_node=1),
                  algorithm="ring") == pytest.approx(6.0)


def test_each_iteration_starts_with_the_tokens_the_one_before_left():
    """A bucket the compute's idle spell refills only in part (10,000 B/s, 4 s: 40,000 of its
    100,000 B): every iteration after the first finds 40,000 B of tokens, not a full bucket. The
    toy's 120,000 B all-reduce (2 ranks: 2 x 0.25 s start-up + 12 s at the rate) takes 0.5 + 12 - 4
    s; a fresh full bucket every iteration (as the model had it) would give 0.5 + 12 - 10."""
    slow = Cluster("toy", intra=None, inter=Link(0.25, 1e-4, burst_bytes=100_000), gpus_per_node=1)
    assert period("bsp-a2a", toy(), slow, algorithm="ring") == pytest.approx(4 + 8.5)
    # a bucket the idle spell fills: every iteration as the first
    fast = Cluster("toy", intra=None, inter=Link(0.25, 1e-4, burst_bytes=30_000), gpus_per_node=1)
    assert period("bsp-a2a", toy(), fast, algorithm="ring") == pytest.approx(4 + 0.5 + 12 - 3)
    # a real link: one iteration is the steady state, as before
    assert period("bsp-a2a", toy(), replace(slow, inter=Link(0.25, 1e-4)), algorithm="ring") == \
        pytest.approx(4 + 12.5)


def test_all_reduces_during_backward_take_the_shared_cores_from_it():
    """Workers on one machine's 2 cores, each all-reduce 0.5 s of its CPU per worker (commbench's
    fusion bursts at 2 ranks): the 2 workers' first 2 WFBP-A2A all-reduces (2 s of CPU) make
    backward 1 s longer, each gradient later in proportion; the last leaves with backward's last
    gradient, when no compute is left to wait, and BSP's all-reduce leaves after backward."""
    alone = Cluster("toy", intra=None, inter=Link(0.25, 1.25e-5), gpus_per_node=1)
    fit = {"s_per_message": 0.5, "s_per_byte": 0.0}
    shared = replace(alone, host_cpu=HostCpu(cores=2, s_per_message=0.0, allreduce={2: fit}))
    assert period("wfbp-a2a", toy(), alone) == pytest.approx(5.0)
    # backward 4 s: p2, p1, p0 ready at 1 + 4/3, 1 + 8/3, 1 + 4; each all-reduce 1 s:
    # [7/3, 10/3], [11/3, 14/3], [5, 6]
    assert period("wfbp-a2a", toy(), shared) == pytest.approx(6.0)
    assert period("bsp-a2a", toy(), shared) == period("bsp-a2a", toy(), alone) == pytest.approx(6.0)
    # per byte: 40,000 B at 2.5e-5 s/B, 2 all-reduces on each of 2 workers, 2 cores: 2 s; backward
    # 5 s: [8/3, 11/3], [13/3, 16/3], [6, 7]
    per_byte = replace(alone, host_cpu=HostCpu(cores=2, s_per_message=0.0,
                                                allreduce={2: {"s_per_message": 0.0, "s_per_byte": 2.5e-5}}))
    assert period("wfbp-a2a", toy(), per_byte) == pytest.approx(7.0)
    # measured at 2 and 4 ranks: each worker count takes its own (3: the lower of the two nearest)
    both = HostCpu(cores=2, s_per_message=0.0, allreduce={2: fit, 4: {"s_per_message": 0.25, "s_per_byte": 1e-6}})
    assert both.allreduce_s(40_000, 4) == pytest.approx(0.29) and both.allreduce_s(40_000, 3) == 0.5
    assert HostCpu(cores=2, s_per_message=0.0).allreduce_s(40_000, 2) is None  # not measured: no cost
    cfg = simulate.method_config("wfbp-a2a")
    four = replace(alone, host_cpu=both)
    plan = simulate.plan_for("wfbp-a2a", toy(), four, 4, simulate.Options())
    assert simulate.host_cpu_s(plan, toy(), four, 4, cfg, simulate.Options()) == pytest.approx(4 * 2 * 0.29 / 2)
    assert simulate.explain("wfbp-a2a", toy(), shared, 2)["shares_s"]["cpu"] == pytest.approx(1.0)


def test_communication_k_times_as_costly_costs_the_shared_cores_k_times_too():
    """network.slower (a local run's communication probe against the bench's commbench burst,
    and make predict's second look): on one machine's cores a message's time is the cores' work,
    so every message's CPU (PS, all-reduce by ranks with its ordered cost, the per-machine node)
    is k times as well as every link. The toy's WFBP-A2A on 2 cores, each all-reduce 0.5 s of a
    worker's CPU: halved, backward is 0.5 s longer where it was 1 s (test above), and each
    all-reduce 0.5 s where it was 1: [13/6, 8/3], [10/3, 23/6], [9/2, 5], the last ready with
    backward's end at 1 + 3.5."""
    fit = {"s_per_message": 0.5, "s_per_byte": 1e-6, "ordered_s_per_message": 0.75}
    hc = HostCpu(cores=2, s_per_message=0.2, s_per_byte=2e-6, allreduce={2: fit},
                 node_ps={2: {"s_per_message": 0.4, "s_per_byte": 3e-6}})
    half = hc.scaled(0.5)
    assert half.cores == 2 and (half.s_per_message, half.s_per_byte) == pytest.approx((0.1, 1e-6))
    assert half.allreduce[2] == pytest.approx({"s_per_message": 0.25, "s_per_byte": 5e-7, "ordered_s_per_message": 0.375})
    assert half.node_ps[2] == pytest.approx({"s_per_message": 0.2, "s_per_byte": 1.5e-6})
    assert hc.allreduce[2]["s_per_message"] == 0.5  # the original kept
    shared = Cluster("toy", intra=None, inter=Link(0.25, 1.25e-5), gpus_per_node=1,
                     host_cpu=HostCpu(cores=2, s_per_message=0.0, allreduce={2: {"s_per_message": 0.5,
                                                                                  "s_per_byte": 0.0}}))
    slow = network.slower(shared, 0.5)
    assert slow.host_cpu.allreduce[2]["s_per_message"] == pytest.approx(0.25)
    assert period("wfbp-a2a", toy(), shared) == pytest.approx(6.0)
    assert period("wfbp-a2a", toy(), slow) == pytest.approx(5.0)
    assert network.slower(replace(shared, host_cpu=None), 0.5).host_cpu is None


def test_bytescheduler_a2a_all_reduces_take_the_cores_at_the_cost_of_ones_its_leader_orders():
    """This runtime's ByteScheduler-A2A launches each all-reduce as its leader chooses it, a
    choice a message of its own: where commbench's ordered rounds priced that
    (`ordered_s_per_message`), its all-reduces take the shared cores at that cost; WFBP's and the
    study's ByteScheduler (no leader) keep the back-to-back cost. The toy's 3 parameters, one
    unit each, the last ready with backward's end: 2 all-reduces on each of 2 workers, 2 cores."""
    fit = {"s_per_message": 0.5, "s_per_byte": 0.0, "ordered_s_per_message": 0.75}
    cluster = Cluster("toy", intra=None, inter=Link(0.25, 1.25e-5), gpus_per_node=1,
                      host_cpu=HostCpu(cores=2, s_per_message=0.0, allreduce={2: fit}))
    prof = toy()
    for method, stack, per_message in (("bytescheduler-a2a", "ddlbench", 0.75), ("bytescheduler-a2a", "study", 0.5),
                                       ("wfbp-a2a", "ddlbench", 0.5)):
        opts = simulate.Options(stack=stack)
        cfg = simulate.method_config(method)
        plan = simulate.plan_for(method, prof, cluster, 2, opts)
        assert simulate.host_cpu_s(plan, prof, cluster, 2, cfg, opts) == pytest.approx(2 * 2 * per_message / 2), \
            (method, stack)


def test_only_the_share_of_an_all_reduce_that_runs_during_backward_takes_its_cores():
    """Each all-reduce 2 s on the stream and 1 s of CPU per worker (2 workers, 2 cores): a
    message's CPU is spread over the time it runs, and only what runs before backward ends
    takes the compute's cores. With a charge of x, backward is 3 + x (k = (3 + x) / 3): p2's
    all-reduce runs [1 + k, 3 + k], all within backward; p1's, ready at 1 + 2k, waits for the
    stream and runs [3 + k, 5 + k], its first 2k - 2 s within backward (ends at 1 + 3k); so
    x = 1 + (k - 1) = k, x = 1.5 and k = 1.5. p0's leaves at backward's end, 5.5, and runs
    [6.5, 8.5]. Counting both earlier messages whole (x = 2) would end at 8 2/3."""
    alone = Cluster("toy", intra=None, inter=Link(0.5, 2.5e-5), gpus_per_node=1)
    shared = replace(alone, host_cpu=HostCpu(cores=2, s_per_message=0.0,
                                              allreduce={2: {"s_per_message": 1.0, "s_per_byte": 0.0}}))
    assert period("wfbp-a2a", toy(), alone) == pytest.approx(8.0)  # [2, 4], [4, 6], [6, 8]
    plan = simulate.plan_for("wfbp-a2a", toy(), shared, 2, simulate.Options())
    cfg = simulate.method_config("wfbp-a2a")
    assert simulate.host_cpu_s(plan, toy(), shared, 2, cfg, simulate.Options()) == pytest.approx(2.0)  # the bound
    assert simulate.allreduce_cpu_in_backward_s(plan, toy(), shared, 2, cfg, simulate.Options()) == \
        pytest.approx(1.5, abs=1e-6)
    assert period("wfbp-a2a", toy(), shared) == pytest.approx(8.5, abs=1e-6)


def test_ps_messages_take_the_shared_cores_from_backward():
    """Workers and servers on one machine's 2 cores, each PS message 0.5 s of its CPU: the 2
    workers' 3 WFBP-PS messages (3 s of CPU) make backward 1.5 s longer, each gradient later in
    proportion; all-reduce methods are untouched."""
    from dataclasses import replace

    from ddlbench.predict.network import HostCpu

    alone = Cluster("toy", intra=None, inter=Link(0.0, 1e-5), gpus_per_node=1)
    shared = replace(alone, host_cpu=HostCpu(cores=2, s_per_message=0.5))
    assert simulate.host_cpu_s(simulate.plan_for("wfbp-ps", toy(), shared, 2, simulate.Options()), toy(), shared, 2,
                               simulate.method_config("wfbp-ps"), simulate.Options()) == pytest.approx(1.5)
    # backward 4.5 s: p2, p1, p0 ready at 1 + 1.5, 1 + 3, 1 + 4.5; each message a 0.8 s push and a
    # 0.8 s pull (test_ps_with_two_servers_by_hand); the last leaves at 5.5, its server idle
    # since 5.6 - 0.8 at the latest: 5.5 + 1.6
    assert period("wfbp-ps", toy(), alone) == pytest.approx(5.6)
    assert period("wfbp-ps", toy(), shared) == pytest.approx(7.1)
    # BSP-PS sends after backward, when the compute needs no core: its link alone, as without
    assert period("bsp-ps", toy(), shared) == period("bsp-ps", toy(), alone) == pytest.approx(4.0 + 2.4 + 2.4)
    # per byte: 40,000 B per message at 2.5e-5 s/B, 3 messages on each of 2 workers, 2 cores: 3 s
    per_byte = replace(alone, host_cpu=HostCpu(cores=2, s_per_message=0.0, s_per_byte=2.5e-5))
    # backward 6 s: p2, p1, p0 ready at 1 + 2, 1 + 4, 1 + 6; the last message ends 1.6 s after 7
    assert period("wfbp-ps", toy(), per_byte) == pytest.approx(8.6)
    # four machines' messages on the same 2 cores take twice the time: backward 3 s longer
    four = simulate.simulate("wfbp-ps", toy(), shared, 4, simulate.Options(servers=2)).period_s
    assert four - simulate.simulate("wfbp-ps", toy(), alone, 4, simulate.Options(servers=2)).period_s \
        == pytest.approx(3.0)
    assert period("wfbp-a2a", toy(), replace(shared, intra=Link(0.25, 1.25e-5), gpus_per_node=2)) \
        == pytest.approx(period("wfbp-a2a", toy(), two_gpus()))
    ex = simulate.explain("wfbp-ps", toy(), shared, 2)
    assert ex["shares_s"]["cpu"] == pytest.approx(1.5) and ex["shares_s"]["compute"] == pytest.approx(4.0)


def test_bytescheduler_machinery_delays_each_update_and_one_worker_calibrates_it():
    # Stack ddlbench, one worker: nothing to send, each gradient lands as it appears (p2 2, p1 3,
    # p0 4 in the first iteration, backward from 1). Each parameter is one unit; with 0.5 s of
    # machinery per unit, updates come one at a time: p2 2.5, p1 3.5, p0 4.5. The next forward
    # (from 4) needs p0 at once: it waits 0.5 s, and so in every iteration: 4.5 s against the
    # compute's 4. At 1 s per unit: p2 3, p1 4, p0 5: 5 s.
    ddl = simulate.Options(stack="ddlbench")
    unit = lambda u: simulate.Options(stack="ddlbench", bytescheduler_unit_s=u)  # noqa: E731
    assert period("bytescheduler-a2a", toy(), two_gpus(), workers=1, stack="ddlbench") == pytest.approx(4.0)
    assert simulate.simulate("bytescheduler-a2a", toy(), two_gpus(), 1, unit(0.5)).period_s == pytest.approx(4.5)
    assert simulate.simulate("bytescheduler-a2a", toy(), two_gpus(), 1, unit(1.0)).period_s == pytest.approx(5.0)
    # the study's one GPU ran without ByteScheduler: compute only; its machinery is no option
    assert period("bytescheduler-a2a", toy(), two_gpus(), workers=1, stack="study") == pytest.approx(4.0)
    with pytest.raises(ValueError, match="bytescheduler_unit_s=1.0 with stack='study' is invalid"):
        simulate.Options(stack="study", bytescheduler_unit_s=1.0)
    # one worker of this runtime launches each parameter's update as its gradient lands (0.1 s
    # each here: p2 at 2, p1 at 3, p0 at 4), but the updates share the device with the compute:
    # they queue behind the backward (to 4), then run before the forward that waits for them:
    # 4.1, 4.2, 4.3, the forward 4.3 to 5.3: compute's 4.3 s, none of it hidden; no jump at a
    # tiny machinery cost
    upd = toy(update=(0.1, 0.1, 0.1))
    assert upd.compute_s == pytest.approx(4.3)
    assert period("bytescheduler-a2a", upd, two_gpus(), workers=1, stack="ddlbench") == pytest.approx(4.3)
    assert simulate.simulate("bytescheduler-a2a", upd, two_gpus(), 1, unit(1e-9)).period_s == pytest.approx(4.3)
    # calibration from a one-worker run inverts it; a run no slower than the compute gives 0
    assert simulate.calibrate_unit_s("bytescheduler-a2a", toy(), two_gpus(), 4.5, ddl) == pytest.approx(0.5)
    assert simulate.calibrate_unit_s("bytescheduler-a2a", toy(), two_gpus(), 4.75, ddl) == pytest.approx(0.75)
    assert simulate.calibrate_unit_s("bytescheduler-a2a", toy(), two_gpus(), 3.9, ddl) == 0.0
    with pytest.raises(ValueError, match="'wfbp-a2a' .* has no ByteScheduler queue to calibrate"):
        simulate.calibrate_unit_s("wfbp-a2a", toy(), two_gpus(), 4.5, ddl)
    # Two workers (the overlap test above, 4.1 s without it): 0.2 s per unit puts p2's update at
    # 3.2, p1's at 4.2, p0's at 5.2; the next forward from 4 needs p0 0.9 s in (4.9): 0.3 s late,
    # backward from 5.3 to 8.3, the next iteration alike: 4.3 s.
    prof = toy(need=(0.9, 0.3, 0.0))
    assert simulate.simulate("bytescheduler-a2a", prof, two_gpus(), 2, unit(0.2)).period_s == pytest.approx(4.3)
    assert simulate.explain("bytescheduler-a2a", prof, two_gpus(), 2, unit(0.2))["shares_s"]["scheduler"] == \
        pytest.approx(0.2)  # what `make predict` names: the iteration without the machinery
    with pytest.raises(ValueError, match="bytescheduler_unit_s=-1.*accepted: >= 0"):
        simulate.Options(bytescheduler_unit_s=-1)


def test_bytescheduler_machinery_beside_other_workers_takes_their_compute():
    """`bytescheduler_cpu_s` (the machinery timed beside the run's other workers) lengthens
    backward as the messages' CPU does. One worker, nothing to send: 0.6 s of it stretch
    backward from 3 to 3.6 s (gradients at 1.2, 2.4, 3.6 s in), each update at once: 4.6 s."""
    cpu = lambda c: simulate.Options(stack="ddlbench", bytescheduler_cpu_s=c)  # noqa: E731
    assert simulate.simulate("bytescheduler-a2a", toy(), two_gpus(), 1, cpu(0.0)).period_s == pytest.approx(4.0)
    assert simulate.simulate("bytescheduler-a2a", toy(), two_gpus(), 1, cpu(0.6)).period_s == pytest.approx(4.6)
    assert simulate.explain("bytescheduler-a2a", toy(), two_gpus(), 1, cpu(0.6))["shares_s"]["scheduler"] == \
        pytest.approx(0.6)
    # a method without ByteScheduler's queue has no such machinery
    assert simulate.simulate("wfbp-a2a", toy(), two_gpus(), 2, cpu(0.6)).period_s == \
        pytest.approx(period("wfbp-a2a", toy(), two_gpus(), stack="ddlbench"))
    with pytest.raises(ValueError, match="bytescheduler_cpu_s=0.5 with stack='study' is invalid"):
        simulate.Options(stack="study", bytescheduler_cpu_s=0.5)
    with pytest.raises(ValueError, match="bytescheduler_cpu_s=-1.*accepted: >= 0"):
        simulate.Options(stack="ddlbench", bytescheduler_cpu_s=-1)


def test_one_worker_of_this_runtimes_ps_pushes_through_its_servers():
    # A 1 s/B link to the server: one worker's pushes dominate; the study's one GPU never
    # reached a server (BytePS not distributed), and an all-reduce method sends nothing.
    slow = two_gpus(inter=Link(0.0, 1.0))
    assert period("bsp-ps", toy(), slow, workers=1, stack="ddlbench") > 100_000
    assert period("bsp-ps", toy(), slow, workers=1, stack="study") == pytest.approx(4.0)
    assert period("wfbp-a2a", toy(), slow, workers=1, stack="ddlbench") == pytest.approx(4.0)
    # a network with no link to a server is a clear error, not a crash
    with pytest.raises(ValueError, match="no link to a PS server.*accepted"):
        period("bsp-ps", toy(), two_gpus(), workers=1, stack="ddlbench")


def test_what_dominates_counts_the_ps_wire_where_one_was_measured():
    # BSP-PS over a measured PS wire (commbench's ps mode) of alpha 5 s and no bandwidth cost,
    # beside an all-reduce link that costs nothing: the rounds' latency is all the exposed cost.
    # (Before, the latency what-if left the PS wire as it was and found no latency at all.)
    from dataclasses import replace
    cluster = replace(Cluster("toy", intra=None, inter=Link(0.0, 0.0), gpus_per_node=1), ps=Link(5.0, 0.0))
    ex = simulate.explain("bsp-ps", toy(), cluster, 2, simulate.Options(stack="ddlbench"))
    assert ex["exposed_comm_s"] > 4.0 and ex["shares_s"]["latency"] == pytest.approx(ex["exposed_comm_s"])
    assert ex["shares_s"]["bandwidth"] == 0.0 and ex["dominant"] == "latency"


def test_expected_max_of_independent_draws_by_hand():
    from ddlbench.predict.profile import expected_max

    # two draws from {1, 2}: the max is 1 only if both are 1 (1/4): 1/4 + 2 * 3/4
    assert expected_max([2.0, 1.0], 2) == pytest.approx(1.75)
    # two from {1, 1, 1, 3}: 3 unless both miss it ((3/4)^2); four: 1 - (3/4)^4 of the time
    assert expected_max([1.0, 3.0, 1.0, 1.0], 2) == pytest.approx(1 * 9 / 16 + 3 * 7 / 16)
    assert expected_max([1.0, 3.0, 1.0, 1.0], 4) == pytest.approx(1 * 81 / 256 + 3 * 175 / 256)
    assert expected_max([1.0, 3.0, 1.0, 1.0], 1) == pytest.approx(1.5)  # one draw: the mean


def test_synchronised_workers_wait_for_the_slowest_ones_compute():
    # one worker's measured iterations 1, 1, 1, 3 s (mean 1.5): two workers wait for the slower
    # of two draws, 1.875 s on average, so every compute time is 1.25 times the profile's: forward
    # 1.25 + backward 3.75, then BSP's all-reduce of 120,000 B (2 s): 7 s, not 6
    spread = replace(toy(), iteration_s=[1.0, 1.0, 1.0, 3.0])
    assert spread.sync_factor(2) == pytest.approx(1.25)
    assert period("bsp-a2a", spread, two_gpus()) == pytest.approx(7.0)
    assert period("bsp-a2a", spread, two_gpus(), stragglers=False) == pytest.approx(6.0)
    # four on one node: compute 4 s x E[max of 4] / mean; the ring's 6 steps of 0.25 + 30,000 B beta
    assert period("bsp-a2a", spread, two_gpus(g=4), workers=4) == \
        pytest.approx(4 * (81 + 3 * 175) / 256 / 1.5 + 6 * (0.25 + 30_000 * 1.25e-5))
    assert period("bsp-a2a", spread, two_gpus(), workers=1) == pytest.approx(4.0)  # one worker waits for no one
    ex = simulate.explain("bsp-a2a", spread, two_gpus(), 2)
    assert ex["shares_s"]["stragglers"] == pytest.approx(1.0) and ex["dominant"] == "compute"
    # a profile with no measured spread (the roofline's): nothing to wait for
    assert toy().sync_factor(8) == 1.0 and period("bsp-a2a", toy(), two_gpus()) == pytest.approx(6.0)


def test_a_measured_profile_keeps_its_iterations(tmp_path, monkeypatch):
    """One worker's measured iterations are kept (scaled with the profile) for the workers to
    wait on; a measured profile cached before they were kept is measured again."""
    import contextlib
    import json

    from ddlbench.predict import profile

    monkeypatch.setattr(profile, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(profile, "_neighbours", lambda *a: contextlib.nullcontext(lambda: None))
    monkeypatch.setattr(profile, "_measure", lambda *a: (toy(), [2.0, 4.0, 3.0]))
    two = profile.measured("tiny-resnet", 1, "cpu", threads=2, sharers=2)
    assert two.iteration_s == [2.0, 4.0, 3.0] and two.compute_s == pytest.approx(3.0)  # scaled to their mean
    assert two.sync_factor(2) == pytest.approx(((2 * 1 + 3 * 3 + 4 * 5) / 9) / 3.0)
    assert profile.measured("tiny-resnet", 1, "cpu", threads=2, sharers=2) == two  # read back from the cache
    fast = two.scaled(2.0, "2 samples/s")  # rescaled (0.5 s an iteration, not 3): the same spread
    assert fast.iteration_s == pytest.approx([1 / 3, 2 / 3, 1 / 2])
    assert fast.sync_factor(2) == pytest.approx(two.sync_factor(2))
    (cached,) = tmp_path.glob("*-s2-*")
    fields = json.loads(cached.read_text())
    del fields["iteration_s"]
    cached.write_text(json.dumps(fields))
    assert profile._read_cached(cached) is None


def test_lanes_run_two_collectives_at_once_each_at_the_shared_speed_by_hand():
    """Gloo's process group runs async collectives on two threads (`Lanes`): up to two at once in
    submission order, each at the shared speed while both run, alone at full speed."""
    sim = simulate.Sim()
    lanes = simulate.Lanes(sim, 2, 0.75)
    ends, starts = {}, {}
    for name, d in (("a", 3.0), ("b", 1.0), ("c", 2.0)):
        lanes.submit(d, lambda name=name: ends.setdefault(name, sim.now), lambda now, name=name: starts.setdefault(name, now))
    # a and b at 0.75: b ends at 1/0.75; a has 2 left and c starts: both end 2/0.75 later
    sim.at(5.0, lanes.submit, 0.5, lambda: ends.setdefault("d", sim.now))  # alone: full speed
    sim.run()
    assert ends == pytest.approx({"b": 4 / 3, "a": 4.0, "c": 4.0, "d": 5.5})
    assert starts == pytest.approx({"a": 0.0, "b": 0.0, "c": 4 / 3})  # c waited for a free lane
    # one running alone, then a second arrives: the first's rest is shared from then on
    sim = simulate.Sim()
    lanes = simulate.Lanes(sim, 2, 0.5)
    ends = {}
    lanes.submit(2.0, lambda: ends.setdefault("a", sim.now))
    sim.at(1.0, lanes.submit, 1.0, lambda: ends.setdefault("b", sim.now))
    sim.run()
    assert ends == pytest.approx({"a": 3.0, "b": 3.0})


def test_starved_lanes_progress_only_at_their_wire_share_by_hand():
    """While the workers compute on cores they outnumber (`Lanes.starve`), a job progresses only
    at the share of its time that needs no core: none on a loopback, its wire's on a shaped link."""
    sim = simulate.Sim()
    lanes = simulate.Lanes(sim, 2, 0.5)
    ends = {}
    lanes.starve(2.0)
    lanes.submit(1.0, lambda: ends.setdefault("a", sim.now), starved_s=1.0)  # all of it needs a core
    lanes.submit(2.0, lambda: ends.setdefault("b", sim.now), starved_s=1.0)  # half of it is wire
    sim.at(6.0, lanes.submit, 1.0, lambda: ends.setdefault("c", sim.now), None, 1.0)  # after: as ever
    sim.run()
    # [0, 2]: a nothing, b 2 x 0.5 x 0.5 = 0.5 (1.5 left); then both at 0.5: a ends at 4, b alone
    # from there with 0.5 left
    assert ends == pytest.approx({"a": 4.0, "b": 4.5, "c": 7.0})
    sim = simulate.Sim()
    lanes = simulate.Lanes(sim, 2, 0.5)
    ends = {}
    lanes.submit(1.0, lambda: ends.setdefault("a", sim.now), starved_s=1.0)
    lanes.submit(2.0, lambda: ends.setdefault("b", sim.now), starved_s=1.0)
    sim.run()
    assert ends == pytest.approx({"a": 2.0, "b": 3.0})  # not starved: the starved share is moot


def test_a_starved_ring_goes_no_further_than_its_step_in_flight_by_hand():
    """A ring all-reduce's 2 (W - 1) steps each begin on its thread: while the workers hold the
    cores, the wire finishes the step in flight and the next waits (`Lanes.submit`'s steps)."""
    assert [simulate.ring_steps(w) for w in (1, 2, 4)] == [1, 2, 6]
    sim = simulate.Sim()
    lanes = simulate.Lanes(sim, 2, 0.5)
    ends = {}
    lanes.starve(4.0)
    # all wire, 4 steps of 0.5 s: alone at full speed it does its first step by 0.5 and stalls
    # till 4, then its 1.5 s left alone: 5.5
    lanes.submit(2.0, lambda: ends.setdefault("a", sim.now), starved_s=0.0, steps=4)
    sim.run()
    assert ends == pytest.approx({"a": 5.5})
    sim = simulate.Sim()
    lanes = simulate.Lanes(sim, 2, 0.5)
    ends = {}
    lanes.starve(6.0)
    # half wire, 2 steps (1 s of its time each); beside it one of one step, half wire too, which
    # goes on at the wire's share throughout the starving, as before
    lanes.submit(2.0, lambda: ends.setdefault("a", sim.now), starved_s=1.0, steps=2)
    lanes.submit(4.0, lambda: ends.setdefault("b", sim.now), starved_s=2.0)
    sim.run()
    # both at 0.5 x 0.5: a's first step done at 4, where it stalls; b 1.5 by 6. Then both at 0.5:
    # a's 1 s ends at 8, b's 2.5 left: 1.5 by 8, then alone: 9.5
    assert ends == pytest.approx({"a": 8.0, "b": 9.5})


def test_a_measured_starved_share_replaces_the_wire_rule_by_hand():
    """Where make commbench timed its round beside compute (`Cluster.starved_share`), a starved
    job's wire runs on and the part that needs a core gets that share of one, through every ring
    step (`simulate.starved_pace`); without one, the wire's share through the first step."""
    assert simulate.starved_pace(1.0, 0.5, 2, None) == pytest.approx((0.5, 0.5))
    assert simulate.starved_pace(1.0, 0.5, 2, 0.5) == pytest.approx((1 / (0.5 + 0.5 / 0.5), math.inf))
    assert simulate.starved_pace(1.0, 0.5, 2, 0.0) == (0.0, 0.0)  # none: stalled at its first core-bound part
    assert simulate.starved_pace(1.0, 0.0, 2, 0.0) == (1.0, math.inf)  # all wire: never starved
    # commbench's round beside compute: three 1 s collectives, all core-bound, on one lane,
    # launched at 1, 2 and 3 s while every rank computes till 3. Share 1: each runs at once,
    # 1-2, 2-3, 3-4. Share 0.5: the first does 1 s by 3, the second 3-4, the third 4-5. None:
    # nothing till 3, then one after another: 6
    took = {share: simulate.computing_round_s([1.0] * 3, [1.0] * 3, 1, 1.0, share, 1.0) for share in (0.0, 0.5, 1.0)}
    assert took == pytest.approx({0.0: 6.0, 0.5: 5.0, 1.0: 4.0})
    assert simulate.starved_share([1.0] * 3, [1.0] * 3, 5.0, 1, 1.0, 1.0) == pytest.approx(0.5)
    assert simulate.starved_share([1.0] * 3, [1.0] * 3, 6.5, 1, 1.0, 1.0) == 0.0  # slower than none
    assert simulate.starved_share([1.0] * 3, [1.0] * 3, 3.5, 1, 1.0, 1.0) == 1.0  # faster than a whole core


def four_workers_on_two_cores() -> Cluster:
    """A loopback measured with Gloo (ring, two lanes at half speed at 4 ranks) whose 4 workers
    share 2 cores, each all-reduce 0.5 s of CPU per worker."""
    return Cluster("toy", intra=None, inter=Link(0.25, 1.25e-5), gpus_per_node=1, measured_algorithm="ring",
                   lane_speed={4: 0.5}, host_cpu=HostCpu(cores=2, s_per_message=0.0,
                                                         allreduce={4: {"s_per_message": 0.5, "s_per_byte": 0.0}}))


def test_all_reduces_wait_out_backward_where_the_workers_outnumber_the_cores():
    """4 workers on 2 cores, all-reduces on Gloo's measured lanes (`simulate.starves`): WFBP-A2A's
    all-reduces launched during backward make no progress till it ends (a loopback: all of an
    all-reduce needs a core) and take no cores from it; on the emulated cluster's shaped links
    they progress at their wire's share, through the first ring step. Forward 1 s, backward 3 s,
    gradients at 2, 3 and 4 s."""
    loop = four_workers_on_two_cores()
    opts = dict(stack="ddlbench", backend="gloo")
    one = loop.allreduce_s(40_000, 4, "ring")
    assert simulate.starves(loop, 4, "ring")
    # at 4: the first two share the lanes from 4 s (2 x one), the third then alone
    assert period("wfbp-a2a", toy(), loop, 4, **opts) == pytest.approx(4 + 3 * one)
    spare = replace(loop, host_cpu=replace(loop.host_cpu, cores=5))  # a core no worker computes on
    for not_starved in (spare, replace(loop, lane_speed={})):
        assert not simulate.starves(not_starved, 4, "ring")
    assert not simulate.starves(loop, 2, "ring") and not simulate.starves(loop, 4, "nccl")  # no lanes measured
    # cores enough: the all-reduces run during backward and take their CPU from it
    assert period("wfbp-a2a", toy(), spare, 4, **opts) < 4 + 3 * one
    # shaped links (a bucket too shallow to matter): 0.75 s of each 2.25 s is wire, a third, and
    # no more than the first of the ring's 6 steps (0.375 s of its time) while starved. p2 alone
    # [2, 3]: 1/3 done; with p1 at 0.5: p2 reaches its step's end at 3.25 and stalls, p1 1/6 by
    # 4; then p2's 1.875 at 0.5 ends at 7.75, p1's last 0.2083 at 0.5 with p0 at 8 1/6, p0's last
    # 2.0417 alone at 10 5/24 (without the step's bound, p2 would have gone on: 10 1/12)
    wire = replace(loop, inter=Link(0.25, 1.25e-5, burst_bytes=1e-6))
    assert one == pytest.approx(2.25) and wire.allreduce_s(40_000, 4, "ring") == pytest.approx(one)
    assert period("wfbp-a2a", toy(), wire, 4, **opts) == pytest.approx(10 + 5 / 24)
    # make commbench's round beside compute found none (4 ranks on 2 cores here): the wire waits
    # on its core-bound part, all stall till 4, as on the loopback; a whole core's worth: p2 alone
    # [2, 3] (1.25 left), with p1 at 0.5 till p2 ends at 5.5; p0 then beside p1 (1 s left), which
    # ends at 7.5; p0's last 1.25 alone: 8.75
    assert period("wfbp-a2a", toy(), replace(wire, starved_share={4: 0.0}), 4, **opts) == pytest.approx(4 + 3 * one)
    assert period("wfbp-a2a", toy(), replace(wire, starved_share={4: 1.0}), 4, **opts) == pytest.approx(8.75)
    assert period("wfbp-a2a", toy(), replace(wire, starved_share={2: 1.0}), 4, **opts) == pytest.approx(10 + 5 / 24)


def test_starved_eager_all_reduces_take_at_least_every_message_cpu_at_the_cores_share():
    """`simulate.cpu_floor_s`: where eager all-reduces starve, an iteration is at least its
    compute plus every message's CPU (commbench's per worker, 0.5 s here, and the runtime's
    launch beyond it, `Options.launch_s`) times W / cores. The toy's 3 messages at 4 workers on
    2 cores: 4 + 3 x (0.5 + 1) x 2 = 13 s, past the lanes' 4 + 3 x 2.25. Without a launch cost
    the lanes bind (7 s of floor); with spare cores, for BSP, PS or ByteScheduler there is none;
    DDP's buckets pay commbench's part only; and every floor pays, once, what make commbench
    found an all-reduce costs after compute (`Cluster.after_compute_s`)."""
    loop = four_workers_on_two_cores()
    opts = dict(stack="ddlbench", backend="gloo")
    lanes = 4 + 3 * loop.allreduce_s(40_000, 4, "ring")
    assert period("wfbp-a2a", toy(), loop, 4, **opts) == pytest.approx(lanes)
    o = simulate.Options(launch_s=1.0, **opts)
    plan = simulate.plan_for("wfbp-a2a", toy(), loop, 4, o)
    assert simulate.cpu_floor_s(plan, toy(), loop, 4, replace(o, launch_s=0.0)) == pytest.approx(4 + 3 * 0.5 * 2)
    assert simulate.cpu_floor_s(plan, toy(), loop, 4, o) == pytest.approx(13.0)
    assert period("wfbp-a2a", toy(), loop, 4, launch_s=1.0, **opts) == pytest.approx(13.0)
    spare = replace(loop, host_cpu=replace(loop.host_cpu, cores=5))
    assert simulate.cpu_floor_s(plan, toy(), spare, 4, o) == 0.0
    assert simulate.cpu_floor_s(plan, toy(), replace(loop, host_cpu=replace(loop.host_cpu, allreduce={})), 4, o) == 0.0
    for method in ("bsp-a2a", "wfbp-ps", "bytescheduler-a2a"):
        other = simulate.plan_for(method, toy(), loop, 4, o)
        assert simulate.cpu_floor_s(other, toy(), loop, 4, o) == 0.0, method
    # DDP's one bucket: commbench's CPU, not the runtime's launch (its reducer launches from C++)
    ddp = simulate.plan_for("ddp", toy(), loop, 4, o)
    assert len(ddp.messages) == 1 and simulate.cpu_floor_s(ddp, toy(), loop, 4, o) == pytest.approx(4 + 0.5 * 2)
    # an iteration's messages come after its compute: where make commbench timed what an
    # all-reduce costs then beyond back to back (0.7 s at 4 ranks on these cores, their wall), the
    # floor pays it once, as the timeline's first message does; not another worker count's
    cold = replace(loop, after_compute_s={4: 0.7, 2: 5.0})
    assert simulate.cpu_floor_s(plan, toy(), cold, 4, o) == pytest.approx(13.0 + 0.7)
    assert simulate.cpu_floor_s(ddp, toy(), cold, 4, o) == pytest.approx(4 + 0.5 * 2 + 0.7)
    assert period("wfbp-a2a", toy(), cold, 4, launch_s=1.0, **opts) == pytest.approx(13.7)
    with pytest.raises(ValueError, match="launch_s=-1.0"):
        simulate.Options(launch_s=-1.0, **opts)
    with pytest.raises(ValueError, match="launch_s=0.1 with stack='study'"):
        simulate.Options(launch_s=0.1)


def test_bytescheduler_all_reduces_also_wait_out_the_next_forward_where_the_workers_outnumber_the_cores():
    """ByteScheduler's all-reduces overlap the next forward as well, whose pieces hold the cores
    as backward does: they wait out backward and a forward's length after it (b_end 4 + 1), then
    p2's and p1's share the lanes, p0's follows alone (the toy's 40 KB gradients, one partition
    each, all within the credit)."""
    loop = four_workers_on_two_cores()
    opts = simulate.Options(stack="ddlbench", backend="gloo")
    prof, one = toy(), loop.allreduce_s(40_000, 4, "ring")
    cfg = simulate.method_config("bytescheduler-a2a")
    plan = simulate.plan_for("bytescheduler-a2a", prof, loop, 4, opts)
    assert simulate.bytescheduler_units(prof, cfg)[0] == [10_000] * 3
    done = simulate._communicate(plan, prof, loop, 4, cfg, opts, 1.0, 4.0)
    assert done == pytest.approx([5 + 3 * one, 5 + 2 * one, 5 + 2 * one])
    four_cores = replace(loop, host_cpu=replace(loop.host_cpu, cores=4))
    assert max(simulate._communicate(plan, prof, four_cores, 4, cfg, opts, 1.0, 4.0)) < 4 + 3 * one


def test_all_reduces_wait_out_backward_where_the_workers_hold_every_core_but_bytescheduler_only_beyond():
    """2 workers on 2 cores (`simulate.starves`): each worker's compute holds a core, and Gloo's
    loop threads, under SCHED_IDLE, get none, so WFBP-A2A's all-reduces wait out backward as
    they do at 4 (the toy's: 4 + 3 x one); ByteScheduler's queue starves only where the workers
    outnumber the cores, so at 2 its all-reduces run as on 4 cores; at 1 worker nothing starves."""
    two = four_workers_on_two_cores()
    two = replace(two, lane_speed={2: 0.5, 4: 0.5},
                  host_cpu=replace(two.host_cpu, allreduce={2: {"s_per_message": 0.5, "s_per_byte": 0.0}}))
    four_cores = replace(two, host_cpu=replace(two.host_cpu, cores=4))
    opts = dict(stack="ddlbench", backend="gloo")
    one = two.allreduce_s(40_000, 2, "ring")
    assert simulate.starves(two, 2, "ring") and not simulate.starves(two, 2, "ring", queue=True)
    assert simulate.starves(two, 4, "ring", queue=True) and not simulate.starves(two, 1, "ring")
    assert not simulate.starves(four_cores, 2, "ring")
    assert period("wfbp-a2a", toy(), two, 2, **opts) == pytest.approx(4 + 3 * one)
    assert period("wfbp-a2a", toy(), four_cores, 2, **opts) < 4 + 3 * one
    o = simulate.Options(**opts)
    prof, cfg = toy(), simulate.method_config("bytescheduler-a2a")
    plan = simulate.plan_for("bytescheduler-a2a", prof, two, 2, o)
    assert simulate._communicate(plan, prof, two, 2, cfg, o, 1.0, 4.0) == \
        pytest.approx(simulate._communicate(plan, prof, four_cores, 2, cfg, o, 1.0, 4.0))
    # each partition alone on the lanes as its gradient appears (2, 3, 4 s): not held to 4
    assert simulate._communicate(plan, prof, two, 2, cfg, o, 1.0, 4.0) == pytest.approx([4 + one, 3 + one, 2 + one])


def test_lane_speed_is_the_speed_at_which_a_burst_takes_its_measured_time_by_hand():
    # four 1 s all-reduces on two lanes at speed s: two pairs, 2 / s
    assert simulate.lane_speed([1.0] * 4, 2.5, 2) == pytest.approx(0.8)
    assert simulate.lane_speed([1.0] * 4, 1.5, 2) == 1.0    # faster than a free lane each: capped
    assert simulate.lane_speed([1.0] * 4, 10.0, 2) == 0.25  # sharing slows each to a quarter at most


def test_gloo_all_reduces_share_two_lanes_where_commbench_timed_a_burst_else_one_stream():
    """Two gradients ready at once on a compute-free step: WFBP-A2A sends two all-reduces. Where
    the config holds a lane speed for the run's worker count (Gloo, this placement) they run at
    once at that speed; elsewhere one after another."""
    n = 1 << 20
    prof = Profile("toy", 1, ["p", "q"], [n // 4, n // 4], 4, ["q", "p"], [0.0, 0.0], [0.0, 0.0], 0.0, 0.0,
                   [0.0, 0.0], "test", 1.0)
    base = Cluster("c", None, Link(1e-4, 1e-9), 1, measured_algorithm="ring")
    one = base.allreduce_s(n, 2, "ring")
    opts = simulate.Options(stack="ddlbench", backend="gloo")
    lanes = replace(base, lane_speed={2: 0.8})
    assert simulate.simulate("wfbp-a2a", prof, base, 2, opts).period_s == pytest.approx(2 * one)
    assert simulate.simulate("wfbp-a2a", prof, lanes, 2, opts).period_s == pytest.approx(one / 0.8)
    assert simulate.simulate("wfbp-a2a", prof, lanes, 4, opts).period_s == \
        pytest.approx(2 * lanes.allreduce_s(n, 4, "ring"))  # not timed at 4 workers
    nccl = simulate.Options(stack="ddlbench", backend="nccl")  # another backend's algorithm: its stream
    assert simulate.simulate("wfbp-a2a", prof, lanes, 2, nccl).period_s == \
        pytest.approx(2 * lanes.allreduce_s(n, 2, "nccl"))
    # another placement drops it with the other measurements
    assert network.with_nodes(lanes, 2, lanes.inter, "test").lane_speed == {}
    assert network.with_nodes(lanes, 2, lanes.inter, "test", same_placement=True).lane_speed == {2: 0.8}


class _LateEvents:
    """Stands in for CUDA events on a CPU: a mark is an event stamped with the host's time when
    recorded, readable only after `settle()` (as a CUDA event is only after a synchronisation);
    counts the settles, i.e. every time the host would have waited for the device."""

    name = "cuda_events"

    def __init__(self):
        self.settles, self.pending = 0, []

    def mark(self):
        import time

        event = {"t": time.perf_counter(), "done": False}
        self.pending.append(event)
        return event

    def settle(self):
        self.settles += 1
        for e in self.pending:
            e["done"] = True
        self.pending = []

    def seconds(self, start, end):
        if not (start["done"] and end["done"]):
            raise RuntimeError("event read before the device was waited for")
        return end["t"] - start["t"]


def test_a_gpu_profile_is_timed_by_events_read_after_the_window_never_waiting_in_a_hook():
    """On a GPU, a measured profile must not wait for the device in its hooks: that serialises
    every layer's kernel launches with the device's work (ResNet-50 at batch 64 on an H100:
    1,036 samples/s so measured, 1,650 in ddlbench's one-worker run). Its marks are events read
    once, after the whole window: one wait for the device, however many iterations and hooks."""
    import torch

    from ddlbench.predict import profile

    clock = _LateEvents()
    made_while_timed = []
    workload = profile._workload

    def watched(*a):  # batches are made before the first mark, as the run makes them
        w, opt = workload(*a)
        make = w.make_batch
        w.make_batch = lambda *b: (made_while_timed.append(bool(clock.pending)), make(*b))[1]
        return w, opt

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(profile, "_workload", watched)
        prof, whole = profile._measure("tiny-resnet", 2, torch.device("cpu"), iters=3, warmup=1, clock=clock)
    assert clock.settles == 1
    assert made_while_timed and not any(made_while_timed)
    assert len(whole) == 3 and all(t > 0 for t in whole)
    n = len(prof.names)
    assert len(prof.ready_s) == len(prof.need_s) == n and sorted(prof.ready_names) == sorted(prof.names)
    # within the hooked iterations (the plain ones in `whole` are others: on the loaded CI machine
    # the hooked passes' 20.8 ms exceeded the longest of three plain iterations, 18.2 ms)
    assert 0 < prof.forward_s and 0 < prof.backward_s and max(prof.ready_s) <= prof.backward_s
    # gradients in backward's order arrive in order; every parameter is needed within the forward
    ready = {name: prof.ready_s[prof.names.index(name)] for name in prof.ready_names}
    assert [ready[name] for name in prof.ready_names] == sorted(ready.values())
    assert all(0 <= t <= prof.forward_s for t in prof.need_s)


def test_a_measured_profile_times_whole_iterations_without_its_hooks():
    """A hook's mark costs host time, which on a GPU whose launches only just keep ahead idles the
    device: ResNet-50 at batch 64 on an H200 iterated at 0.77 of the run's rate with its hooks. So
    the profile's per-layer times come from hooked iterations and the whole iteration, which its
    throughput is scaled to, from plain ones in between. Stand-in: a clock whose every mark costs
    the host 2 ms, some 40 times a hooked tiny-resnet pass."""
    import time

    import torch

    from ddlbench.methods.mgwfbp import HostClock
    from ddlbench.predict import profile

    class CostlyMarks(HostClock):
        marks = 0

        def mark(self):
            self.marks += 1
            time.sleep(0.002)
            return time.perf_counter()

    clock = CostlyMarks()
    prof, whole = profile._measure("tiny-resnet", 2, torch.device("cpu"), iters=3, warmup=1, clock=clock)
    hooked_marks = 3 + len(prof.names) + len(prof.need_s)  # at least: forward, backward, end; gradients; needs
    assert hooked_marks * 0.002 < prof.forward_s + prof.backward_s  # the hooked passes paid for their marks
    # a plain iteration pays no mark (each would cost it 2 ms x the marks); the fastest, as another
    # job on a loaded machine can stretch any one of them (`-n 2` on 2 cores: one of three past half)
    assert len(whole) >= 3 and min(whole) < 0.5 * (prof.forward_s + prof.backward_s)
    # every iteration marks its start, step and end; hooked ones each of their layers too
    assert clock.marks >= 3 * 7 + 3 * hooked_marks


def test_a_gpu_profile_cached_with_a_wait_in_every_hook_is_measured_again(tmp_path):
    import dataclasses
    import json

    from ddlbench.predict import profile

    old = dict(dataclasses.asdict(toy()), iteration_s=[1.0],
               source="measured: one worker on cuda, hooks, per-layer medians scaled to the mean iteration")
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    assert profile._read_cached(path) is None
    # events, but a batch made in every iteration (7d21a11): measured again too
    path.write_text(json.dumps({**old, "source": old["source"].replace("hooks", "hooks (CUDA events)")}))
    assert profile._read_cached(path) is None
    # events, batches first, but scaled to the hooked iterations: measured again too
    first_made = "hooks (CUDA events read after the window, batches made first)"
    path.write_text(json.dumps({**old, "source": old["source"].replace("hooks", first_made)}))
    assert profile._read_cached(path) is None
    path.write_text(json.dumps({**old, "source": old["source"].replace("hooks", profile.CUDA_HOOKS)}))
    assert profile._read_cached(path) is not None
    path.write_text(json.dumps({**old, "source": old["source"].replace("cuda", "cpu")}))
    assert profile._read_cached(path) is not None


def test_a_measured_profile_is_taken_on_the_gpu_where_one_is_visible_and_a_bad_device_is_refused():
    import torch

    from ddlbench.predict import cli

    assert cli.measure_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert cli.measure_device("cpu") == "cpu"
    for bad in ("tpu", "cuda:", "cuda:abc", "cuda:-1", "cuda0"):
        with pytest.raises(ValueError, match=re.escape(f"{bad!r} (DEVICE with make) is invalid; accepted: auto, cpu, cuda, cuda:N")):
            cli.measure_device(bad)
    if torch.cuda.is_available():
        n = torch.cuda.device_count()
        assert cli.measure_device(f"cuda:{n - 1}") == f"cuda:{n - 1}"
        with pytest.raises(ValueError, match=f"{n} CUDA GPU"):
            cli.measure_device(f"cuda:{n}")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU is visible here"):
            cli.measure_device("cuda")


def test_ps_replies_leave_one_machine_after_another_on_the_emulated_links_by_hand():
    # BSP-PS, 2 machines of 1 worker, one 120,000 B message (one partition, one server) on links
    # of 1e-5 s/B, no start-up: a push or a reply takes d = 1.2 s. A tc tbf link (a bucket, here
    # of 1 byte: no help) queues the server's replies in one FIFO. Both machines compute 4 s and
    # push; the server's downlink takes the pushes one after the other (4-5.2, 5.2-6.4), then its
    # uplink sends machine 0's reply (6.4-7.6) and machine 1's (7.6-8.8). Machine 0 starts again
    # at 7.6, pushes at 11.6; machine 1 at 8.8, pushes at 12.8: the pushes no longer meet, the
    # replies end at 15.2 and 16.4, and every machine's period is 4 + 3 d = 7.6 s.
    tbf = Cluster("toy", intra=None, inter=Link(0.0, 1e-5, burst_bytes=1), gpus_per_node=1)
    assert simulate.fifo_pulls(tbf, 2) and not simulate.fifo_pulls(tbf, 1)
    assert period("bsp-ps", toy(), tbf) == pytest.approx(7.6, rel=1e-4)
    # a real link interleaves the replies: every machine gets its reply at 4 + 2 d + 2 d = 8.8 s
    real = Cluster("toy", intra=None, inter=Link(0.0, 1e-5), gpus_per_node=1)
    assert not simulate.fifo_pulls(real, 2)
    assert period("bsp-ps", toy(), real) == pytest.approx(8.8, rel=1e-4)
    # 4 machines (4 servers, one holds the key): 4 + 5 d = 10 s, not 4 + 8 d = 13.6 s
    assert period("bsp-ps", toy(), tbf, workers=4) == pytest.approx(10.0, rel=1e-4)
    assert period("bsp-ps", toy(), real, workers=4) == pytest.approx(13.6, rel=1e-4)
    # explain's what-ifs keep the links' buckets (a link of no per-byte time has nothing to save)
    ex = simulate.explain("bsp-ps", toy(), tbf, 2, simulate.Options(horovod_cycle_s=0.0))
    assert ex["period_s"] == pytest.approx(7.6, rel=1e-4) and ex["shares_s"]["bandwidth"] == pytest.approx(3.6, rel=1e-3)


def test_ps_replies_land_at_the_profile_commbench_measured_by_hand():
    # The toy above (BSP-PS, one 120,000 B message, d = 1.2 s a push or a reply, a tbf link),
    # where make commbench measured how much earlier than the last each reply lands
    # (Cluster.ps_landing, in replies' times at the rate, fastest first).
    # 2 machines, the first reply half a reply before the last (g = 0.6 s): the pushes arrive at
    # 5.2 and 6.4, both replies go out 6.4-8.8, machine 0's lands at 8.2 and machine 1's at 8.8.
    # Machine 0 pushes at 12.2 (in 13.4), machine 1 at 12.8, through the server's downlink after
    # it (13.4-14.6); the replies go 14.6-17.0, landing at 16.4 and 17.0: the period is
    # 4 + 4 d - g = 8.2 s, between one after another (4 + 3 d = 7.6) and together (4 + 4 d = 8.8).
    def tbf(landing):
        c = Cluster("toy", intra=None, inter=Link(0.0, 1e-5, burst_bytes=1), gpus_per_node=1)
        c.ps_landing.update(landing)
        return c

    assert period("bsp-ps", toy(), tbf({2: ([120_000], [[0.5, 0.0]])})) == pytest.approx(8.2, rel=1e-4)
    # between two measured sizes, the line in log size: halfway between 12 kB and 1.2 MB
    assert period("bsp-ps", toy(), tbf({2: ([12_000, 1_200_000], [[1.0, 0.0], [0.0, 0.0]])})) == \
        pytest.approx(8.2, rel=1e-4)
    assert tbf({2: ([12_000, 1_200_000], [[1.0, 0.0], [0.0, 0.0]])}).landing_gaps(2, 120_000) == \
        pytest.approx([0.5, 0.0])
    # every reply landing with the last: the machines stay in step, as on a real link (4 + 8 d)
    assert period("bsp-ps", toy(), tbf({4: ([120_000], [[0.0] * 4])}), workers=4) == pytest.approx(13.6, rel=1e-4)
    # never earlier than one after another (a FIFO queue's most spread): 4 + 3 d
    assert period("bsp-ps", toy(), tbf({2: ([120_000], [[5.0, 0.0]])})) == pytest.approx(7.6, rel=1e-4)
    # measured for another number of machines only: one after another, as before
    assert tbf({4: ([120_000], [[0.0] * 4])}).landing_gaps(2, 120_000) is None
    assert period("bsp-ps", toy(), tbf({4: ([120_000], [[0.0] * 4])})) == pytest.approx(7.6, rel=1e-4)
