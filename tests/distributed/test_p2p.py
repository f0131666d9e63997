"""Point-to-point semantics and timing of simcomm.distributed."""
import numpy as np
import pytest

import simcomm
import simcomm.distributed as dist
from simcomm import clock


def one_way(cluster, nprocs, src, dst, tensor_factory):
    """Simulated seconds src's send and dst's recv each take, posted at the same instant."""
    def fn(rank):
        t = tensor_factory()
        t0 = clock.time()
        if rank == src:
            dist.send(t, dst)
        elif rank == dst:
            dist.recv(t, src)
        return clock.time() - t0

    res = simcomm.spawn(fn, nprocs=nprocs, cluster=cluster)
    return res, res.results[src], res.results[dst]


ROUTES = [
    pytest.param("hgx-h100", 8, 0, 1, "nvlink", id="nvlink"),
    pytest.param("pcie-4gpu", 4, 0, 1, "pcie", id="pcie-same-switch"),
    pytest.param("pcie-4gpu", 4, 0, 3, "pcie", id="pcie-across-host-bridge"),
    pytest.param("hgx-h100", 16, 0, 8, "net", id="inter-node-0-8"),
    pytest.param("hgx-h100", 16, 3, 11, "net", id="inter-node-3-11"),
]


@pytest.mark.parametrize("cluster, nprocs, src, dst, kind", ROUTES)
@pytest.mark.parametrize("nbytes", [4, 1 << 20, 3 * (1 << 24)])
def test_uncontended_transfer_is_latency_plus_bytes_over_bottleneck(cluster, nprocs, src, dst, kind, nbytes):
    res, t_send, t_recv = one_way(cluster, nprocs, src, dst, lambda: np.zeros(nbytes // 4, dtype=np.float32))
    c = res.cluster
    links = c.route(src, dst)
    assert kind in {c.link_kind[int(j)] for j in links}
    expected = float(c.link_latency[links].sum()) + nbytes / float(c.link_capacity[links].min())
    assert t_send == pytest.approx(expected, rel=1e-9)
    assert t_recv == pytest.approx(expected, rel=1e-9)
    assert res.elapsed == pytest.approx(expected, rel=1e-9)


def test_inter_node_route_is_slower_than_nvlink():
    c = simcomm.build_cluster("hgx-h100", nodes=2)
    assert c.num_ranks == 16 and c.node_of(8) == 1 and c.node_of(11) == 1
    assert c.bottleneck(0, 8)[0] < c.bottleneck(0, 1)[0]
    assert c.bottleneck(0, 8)[1] > c.bottleneck(0, 1)[1]


def test_size_only_costs_the_same_as_real_data():
    n = 1 << 18
    _, real_s, real_r = one_way("hgx-h100", 16, 2, 9, lambda: np.ones(n, dtype=np.float32))
    _, fake_s, fake_r = one_way("hgx-h100", 16, 2, 9, lambda: simcomm.size_only(n))
    assert (real_s, real_r) == (fake_s, fake_r)
    _, bf_s, _ = one_way("hgx-h100", 16, 2, 9, lambda: simcomm.size_only(2 * n, dtype="bfloat16"))
    assert bf_s == real_s  # same bytes


def test_size_only_and_real_do_not_mix_in_one_transfer():
    """A size-only send into a real buffer would leave the buffer silently unchanged: both ends raise instead."""
    def fn(rank):
        if rank == 0:
            dist.send(simcomm.size_only(4), 1)
        else:
            buf = np.full(4, 7.0, dtype=np.float32)
            dist.recv(buf, 0)
            return buf

    with pytest.raises(simcomm.MismatchError, match="rank 0 sends size-only float32.4. to rank 1 .tag 0., but "
                                                    r"rank 1 receives into float32\[4\]"):
        simcomm.spawn(fn, nprocs=2)


def test_recv_returns_sender_and_any_source_takes_earliest():
    def fn(rank):
        if rank == 0:
            got = []
            t = np.zeros(1)
            for _ in range(3):
                src = dist.recv(t)  # src=None: any source
                got.append((src, float(t[0])))
            return got
        clock.sleep((4 - rank) * 1e-3)  # rank 3 sends first, then 2, then 1
        dist.send(np.array([rank * 10.0]), 0)

    assert simcomm.spawn(fn, nprocs=4).results[0] == [(3, 30.0), (2, 20.0), (1, 10.0)]


def test_recv_with_explicit_src_returns_it():
    def fn(rank):
        if rank == 1:
            return dist.recv(np.zeros(2), src=0)
        if rank == 0:
            dist.send(np.ones(2), dst=1)

    assert simcomm.spawn(fn, nprocs=2).results[1] == 0


def test_tags_select_the_matching_send():
    def fn(rank):
        if rank == 0:
            dist.send(np.array([1.0]), 1, tag=7)
            dist.send(np.array([2.0]), 1, tag=3)
        else:
            a, b = np.zeros(1), np.zeros(1)
            wa = dist.irecv(a, 0, tag=3)
            wb = dist.irecv(b, 0, tag=7)
            wa.wait()
            wb.wait()
            return float(a[0]), float(b[0])

    assert simcomm.spawn(fn, nprocs=2).results[1] == (2.0, 1.0)


def test_same_tag_messages_arrive_in_order():
    def fn(rank):
        if rank == 0:
            for i in range(5):
                dist.isend(np.array([float(i)]), 1)
        else:
            out = []
            for _ in range(5):
                t = np.zeros(1)
                dist.recv(t, 0)
                out.append(float(t[0]))
            return out

    assert simcomm.spawn(fn, nprocs=2).results[1] == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_isend_irecv_work_completion_follows_simulated_time():
    nbytes = 1 << 20

    def fn(rank):
        t = np.arange(nbytes // 4, dtype=np.float32) if rank == 0 else np.zeros(nbytes // 4, dtype=np.float32)
        work = dist.isend(t, 1) if rank == 0 else dist.irecv(t, 0)
        before = work.is_completed()
        clock.sleep(1e-9)  # far less than the transfer takes
        early = work.is_completed()
        assert work.wait() is True
        done_at = clock.time()
        after = work.is_completed()
        clock.sleep(1.0)
        return before, early, after, work.is_completed(), done_at, float(t[-1])

    res = simcomm.spawn(fn, nprocs=2)
    bw, lat = res.cluster.bottleneck(0, 1)
    for before, early, after, later, done_at, last in res.results:
        assert (before, early, after, later) == (False, False, True, True)
        assert done_at == pytest.approx(lat + nbytes / bw, rel=1e-9)
        assert last == nbytes // 4 - 1


def test_work_completes_while_rank_computes():
    def fn(rank):
        t = np.ones(4) if rank == 0 else np.zeros(4)
        work = dist.isend(t, 1) if rank == 0 else dist.irecv(t, 0)
        clock.sleep(1.0)  # "do other work" longer than the transfer
        done = work.is_completed()
        work.wait()
        return done, clock.time(), t.tolist()

    for done, now, data in simcomm.spawn(fn, nprocs=2).results:
        assert done and now == 1.0 and data == [1.0] * 4


def test_batch_isend_irecv_ring_exchange():
    n = 8

    def fn(rank):
        send = np.full(3, float(rank))
        recv = np.zeros(3)
        # Everyone posts its send first: blocking sends in this order would deadlock, the batch does not.
        ops = [dist.P2POp(dist.isend, send, (rank + 1) % n), dist.P2POp(dist.irecv, recv, (rank - 1) % n)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        return recv.tolist()

    res = simcomm.spawn(fn, nprocs=n)
    assert res.results == [[float((r - 1) % n)] * 3 for r in range(n)]
    bw, lat = res.cluster.bottleneck(0, 1)
    # Every flow uses its own NVLink ports: the whole exchange takes one uncontended transfer time.
    assert res.elapsed == pytest.approx(lat + 24 / bw, rel=1e-9)


def test_batch_isend_irecv_rejects_empty_and_bad_ops():
    def fn(rank):
        with pytest.raises(ValueError):
            dist.batch_isend_irecv([])
        with pytest.raises(ValueError):
            dist.P2POp(dist.send, np.zeros(1), 1 - rank)

    simcomm.spawn(fn, nprocs=2)


def test_torch_tensors_receive_in_place():
    import torch

    def fn(rank):
        if rank == 0:
            t = torch.arange(6, dtype=torch.float64).reshape(2, 3)
            dist.send(t, 1)
            return t
        t = torch.zeros(2, 3, dtype=torch.float64)
        ident = id(t)
        dist.recv(t, 0)
        assert id(t) == ident
        return t

    res = simcomm.spawn(fn, nprocs=2).results
    assert torch.equal(res[1], torch.arange(6, dtype=torch.float64).reshape(2, 3))


def test_torch_isend_irecv_and_views():
    import torch

    def fn(rank):
        if rank == 0:
            w = dist.isend(torch.tensor([5, 6, 7], dtype=torch.int32), 1)
            w.wait()
            return None
        big = torch.zeros(2, 3, dtype=torch.int32)
        w = dist.irecv(big[1], 0)  # a row view: the data lands inside `big`
        w.wait()
        return big

    res = simcomm.spawn(fn, nprocs=2).results
    assert res[1].tolist() == [[0, 0, 0], [5, 6, 7]]


def test_send_snapshot_is_taken_at_match_time():
    """The sender may reuse its buffer once send returns; the receiver keeps what was sent."""
    def fn(rank):
        if rank == 0:
            t = np.array([1.0])
            dist.send(t, 1)
            t[0] = 99.0
            dist.send(t, 1)
        else:
            a, b = np.zeros(1), np.zeros(1)
            dist.recv(a, 0)
            dist.recv(b, 0)
            return float(a[0]), float(b[0])

    assert simcomm.spawn(fn, nprocs=2).results[1] == (1.0, 99.0)


def test_group_peer_arguments():
    def fn(rank):
        g = dist.new_group([1, 3])
        if rank == 1:
            dist.send(np.array([4.0]), group=g, group_dst=1)
        elif rank == 3:
            t = np.zeros(1)
            src = dist.recv(t, group=g, group_src=0)
            return src, float(t[0])

    assert simcomm.spawn(fn, nprocs=4).results[3] == (1, 4.0)


def test_contended_sends_share_the_link():
    """Two ranks sending to one receiver share its NVLink port: both take twice as long."""
    nbytes = 1 << 24

    def fn(rank):
        if rank in (1, 2):
            dist.send(simcomm.size_only(nbytes // 4), 0)
        elif rank == 0:
            for w in [dist.irecv(simcomm.size_only(nbytes // 4), s) for s in (1, 2)]:
                w.wait()
        return clock.time()

    res = simcomm.spawn(fn, nprocs=3)
    bw, lat = res.cluster.bottleneck(1, 0)
    assert res.results[1] == pytest.approx(lat + 2 * nbytes / bw, rel=1e-9)
    assert res.results[2] == pytest.approx(lat + 2 * nbytes / bw, rel=1e-9)


def test_torch_send_and_recv_take_contiguous_tensors_only():
    """torch's gloo refuses a strided tensor in send ('input tensor has to be contiguous', measured); its collectives
    copy views, so only send/recv refuse them. Numpy views (simcomm's own) and one-element views stay fine."""
    import torch

    def fn(rank):
        errors = []
        for call in (lambda: dist.send(torch.arange(4.0)[::2], dst=1 - rank),
                     lambda: dist.recv(torch.zeros(4)[::2], src=1 - rank)):
            try:
                call()
            except dist.DistError as exc:
                errors.append(str(exc))
        one, many = torch.zeros(4)[1::4], np.zeros(4)
        if rank == 0:
            dist.send(torch.ones(4)[::4] * 5, dst=1)
            dist.send(np.arange(4.0)[::2], dst=1)
        else:
            dist.recv(one, src=0)
            dist.recv(many[::2], src=0)
        return errors, one.tolist(), many.tolist()

    res = simcomm.spawn(fn, nprocs=2, cluster="cpu-host").results
    assert [e for e, _, _ in res] == [[f"rank {r}: {k}: input tensor has to be contiguous (torch's send and recv "
                                       "take contiguous tensors only)" for k in ("send", "recv")] for r in (0, 1)]
    assert res[1][1:] == ([5.0], [0.0, 0.0, 2.0, 0.0])
