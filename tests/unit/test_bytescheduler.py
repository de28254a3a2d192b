"""ByteScheduler's queue, pure: priority, credit in parameters and ByteScheduler's credit rule
(send while credit remains), and who decides the launch order."""
from types import SimpleNamespace

from ddlbench.methods.bytescheduler import ByteScheduler, CreditQueue


def test_the_most_urgent_partition_goes_first_and_a_late_urgent_one_overtakes():
    q = CreditQueue(credit=2, sizes=[1, 1, 1, 1])
    for pid in (3, 2):
        q.push(pid)
    assert q.pop() == 2
    q.push(0)  # ready later, more urgent
    assert q.pop() == 0
    assert q.pop() is None  # credit spent: 2 parameters in flight
    q.release(2)
    assert q.pop() == 3


def test_credit_is_counted_in_parameters_and_sends_while_credit_remains():
    # credit 10 parameters, partitions of 4, 4, 4 and 1 parameters (hand-worked):
    q = CreditQueue(credit=10, sizes=[4, 4, 4, 1])
    for pid in range(4):
        q.push(pid)
    assert (q.pop(), q.in_flight) == (0, 4)
    assert (q.pop(), q.in_flight) == (1, 8)
    # 8 < 10: credit remains, so partition 2 goes although 8 + 4 > 10 (ByteScheduler's rule;
    # a "only if it fits" rule would hold it back)
    assert (q.pop(), q.in_flight) == (2, 12)
    assert q.pop() is None and len(q) == 1
    q.release(0)
    assert (q.pop(), q.in_flight) == (3, 9)
    assert q.pop() is None and len(q) == 0


def test_a_follower_takes_the_leaders_choice_out_of_its_own_queue():
    q = CreditQueue(credit=1, sizes=[5, 5, 5])
    for pid in (0, 1, 2):
        q.push(pid)
    q.take(1)
    assert q.in_flight == 5 and sorted(q.heap) == [0, 2]


def _scheduler(architecture, world, rank=0, transport=None):
    cfg = SimpleNamespace(architecture=architecture, partition_params=8, credit_params=32)
    ctx = SimpleNamespace(rank=rank, world=world, control="the Gloo control group")
    return ByteScheduler(cfg, ctx, transport or SimpleNamespace())


def test_on_all_reduce_rank0_decides_over_the_gloo_control_group():
    # The order travels over ctx.control (Gloo on every device), never a group of the default
    # backend, which is NCCL on GPUs and cannot carry the CPU tensors of the order.
    assert _scheduler("a2a", 3)._order_domain() == ("the Gloo control group", 0, [1, 2])
    assert _scheduler("a2a", 1)._order_domain() is None


def test_on_ps_the_transport_says_who_decides():
    assert _scheduler("ps", 4)._order_domain() is None  # each worker pushes on its own
    node = SimpleNamespace(order_group=("node group", 2, [2, 3]))
    assert _scheduler("ps", 4, rank=3, transport=node)._order_domain() == ("node group", 2, [3])
