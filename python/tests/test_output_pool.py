"""The output pool of compiled graphs (fxhlo.runner.OutputPool): a large output's memory is
reused by a later call only once the caller no longer holds it."""

import torch

from fxhlo.runner import OutputPool


def _f(x):
    return torch.softmax(x * 2.0, dim=-1)


def _compiled():
    torch._dynamo.reset()
    return torch.compile(_f, backend="fxhlo", options={"cache": False, "strict": True})


def test_a_dropped_output_is_reused_and_a_held_one_never_overwritten():
    c = _compiled()
    x = torch.randn(256, 1024)  # 1 MiB output: pooled
    a = c(x)
    want = _f(x)
    torch.testing.assert_close(a, want)
    ptr = a.data_ptr()
    b = c(x + 1.0)  # `a` still held: `b` gets fresh memory and `a` keeps its values
    assert b.data_ptr() != ptr
    torch.testing.assert_close(a, want)
    torch.testing.assert_close(b, _f(x + 1.0))
    del a
    view = b[3:]  # a view keeps b's storage alive
    del b
    d = c(x)
    assert d.data_ptr() != view.data_ptr() - 3 * 1024 * 4
    torch.testing.assert_close(view, _f(x + 1.0)[3:])
    del view, d
    e = c(x)
    e_ptr = e.data_ptr()
    del e
    f = c(x - 1.0)  # nobody holds e: its memory backs f
    assert f.data_ptr() == e_ptr
    torch.testing.assert_close(f, _f(x - 1.0))


def test_small_outputs_and_the_limit(monkeypatch):
    monkeypatch.setenv("FXHLO_OUTPUT_POOL_MIB", "0")
    p = OutputPool([(torch.float32, (1024, 1024))])
    outs = p.take()
    p.give(outs)
    assert p.kept == [None]  # limit 0: pooling off
    monkeypatch.setenv("FXHLO_OUTPUT_POOL_MIB", "1024")
    small = OutputPool([(torch.float32, (8, 8))])
    small.give(small.take())
    assert small.kept == [None]  # under MIN_BYTES: left to the allocator
    big = OutputPool([(torch.float32, (1024, 1024))])
    t = big.take()[0]
    big.give([t])
    assert big.kept[0] is not None
    del t
    again = big.take()[0]
    assert again.shape == (1024, 1024) and again.is_contiguous()
    big.release()
