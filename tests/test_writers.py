"""Append semantics of the cache writer: invalid slots skipped, lowest duplicate row wins,
untouched rows unchanged, int32 and int64 slot mappings, strided views."""
import re

import pytest
import torch

import torch_ops
from helpers import DEVICES, cache_view, random_latent
from torch_ops.reference import cache_rows_bytes, nvfp4_quantize_reference


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("slot_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("view,pad", [("3d", 0), ("HND", 32), ("NHD", 16)])
def test_append_semantics(device, slot_dtype, view, pad):
    g = torch.Generator().manual_seed(7)
    pages, page_size = 4, 6
    num_slots = pages * page_size
    base_latent = random_latent(num_slots, g).view(pages, page_size, 512)
    packed = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(base_latent.to(device))
    cache = cache_view(packed, view, pad, g)
    storage_before = cache.as_strided((cache.untyped_storage().nbytes() - cache.storage_offset(),), (1,)).clone()

    rows = random_latent(9, g)
    slots = torch.tensor([5, -1, 23, 5, num_slots, 11, -7, 23, 0], dtype=slot_dtype)
    torch_ops.nvfp4_quantize_append_sparse_mla_cache(rows.to(device), slots.to(device), cache)

    ref_data, ref_scale = nvfp4_quantize_reference(rows)
    old_data, old_scale = nvfp4_quantize_reference(base_latent.view(num_slots, 512))
    winners = {5: 0, 23: 2, 11: 5, 0: 8}  # lowest input row per valid slot
    data, scale = cache_rows_bytes(cache, torch.arange(num_slots))
    for slot in range(num_slots):
        if slot in winners:
            assert torch.equal(data[slot], ref_data[winners[slot]]), f"slot {slot}"
            assert torch.equal(scale[slot], ref_scale[winners[slot]]), f"slot {slot}"
        else:
            assert torch.equal(data[slot], old_data[slot]), f"slot {slot} changed"
            assert torch.equal(scale[slot], old_scale[slot]), f"slot {slot} changed"
    # Bytes outside the addressed rows (page padding, tail) are untouched.
    storage_after = cache.as_strided(storage_before.shape, (1,))
    changed = (storage_after != storage_before).nonzero().flatten().cpu()
    _, _, page_stride = torch_ops.cache.cache_geometry(cache)
    allowed = set()
    for slot in winners:
        p, r = divmod(slot, page_size)
        allowed.update(range(p * page_stride + r * 352, p * page_stride + (r + 1) * 352))
        allowed.update(range(p * page_stride + page_size * 352 + r * 32, p * page_stride + page_size * 352 + (r + 1) * 32))
    assert set(changed.tolist()) <= allowed


@pytest.mark.parametrize("device", DEVICES)
def test_append_many_duplicates_is_deterministic(device):
    g = torch.Generator().manual_seed(11)
    cache = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(random_latent(64, g).view(1, 64, 512).to(device))
    rows = random_latent(2000, g)
    slots = torch.randint(0, 64, (2000,), generator=g)
    torch_ops.nvfp4_quantize_append_sparse_mla_cache(rows.to(device), slots.to(device), cache)
    ref_data, _ = nvfp4_quantize_reference(rows)
    data, _ = cache_rows_bytes(cache, torch.arange(64))
    for slot in range(64):
        hits = (slots == slot).nonzero().flatten()
        if hits.numel():
            assert torch.equal(data[slot], ref_data[hits[0]])


def test_writer_argument_errors():
    cache = torch.zeros(2, 4, 384, dtype=torch.uint8)
    rows = torch.zeros(3, 512, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="slot_mapping: expected dtype int32 or int64"):
        torch_ops.nvfp4_quantize_append_sparse_mla_cache(rows, torch.zeros(3, dtype=torch.float32), cache)
    with pytest.raises(ValueError, match=r"slot_mapping: expected shape \[3\]"):
        torch_ops.nvfp4_quantize_append_sparse_mla_cache(rows, torch.zeros(4, dtype=torch.int32), cache)
    with pytest.raises(ValueError, match="latent_kv: expected dtype bfloat16"):
        torch_ops.nvfp4_quantize_append_sparse_mla_cache(rows.float(), torch.zeros(3, dtype=torch.int32), cache)
    with pytest.raises(ValueError, match=r"latent_kv: expected shape \[N, 512\]"):
        torch_ops.nvfp4_quantize_append_sparse_mla_cache(rows[:, :256], torch.zeros(3, dtype=torch.int32), cache)
    with pytest.raises(ValueError, match="cache: expected dtype uint8"):
        torch_ops.nvfp4_quantize_append_sparse_mla_cache(rows, torch.zeros(3, dtype=torch.int32), cache.float())
    with pytest.raises(ValueError, match="kv_layout"):
        torch_ops.nvfp4_quantize_pack_sparse_mla_cache(torch.zeros(1, 4, 512, dtype=torch.bfloat16), kv_layout="XYZ")
    with pytest.raises(ValueError, match=r"latent_kv: expected shape \[2, 4, 512\]"):
        torch.ops.cake.nvfp4_pack_cache(torch.zeros(1, 4, 512, dtype=torch.bfloat16), cache)


def _writer_error(call, *tensors):
    """The ValueError message of `call(*tensors)`, or None."""
    try:
        call(*tensors)
    except ValueError as error:
        return str(error)
    return None


def test_writer_fakes_raise_the_writers_errors():
    """On meta tensors and under a caller's FakeTensorMode the writers' fakes raise the eager call's
    ValueError, message and all (the same C++ checks, the cache's alignment aside), and accept what
    it accepts."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from test_validation import _without_data

    cache = torch.zeros(2, 4, 384, dtype=torch.uint8)
    rows = torch.zeros(3, 512, dtype=torch.bfloat16)
    slots = torch.zeros(3, dtype=torch.int32)
    append, pack = torch.ops.cake.nvfp4_append_cache, torch.ops.cake.nvfp4_pack_cache
    cases = {
        "slots int16": (append, rows, slots.to(torch.int16), cache),
        "slots float": (append, rows, slots.float(), cache),
        "slots too few": (append, rows, slots[:2], cache),
        "rows float": (append, rows.float(), slots, cache),
        "cache 2-D": (append, rows, slots, cache.view(8, 384)),
        "cache token stride": (append, rows, slots, torch.zeros(2, 4, 400, dtype=torch.uint8)[:, :, :384]),
        "cache page stride": (append, rows, slots, torch.zeros(2, 4 * 384 + 8, dtype=torch.uint8)[:, :4 * 384].view(2, 4, 384)),
        "pack pages": (pack, torch.zeros(3, 4, 512, dtype=torch.bfloat16), cache),
        "pack last dim": (pack, torch.zeros(2, 4, 512, dtype=torch.bfloat16), torch.zeros(2, 4, 383, dtype=torch.uint8)),
        "append fine": (append, rows, slots, cache),
        "pack fine": (pack, torch.zeros(2, 4, 512, dtype=torch.bfloat16), cache),
    }
    for name, (op, *tensors) in cases.items():
        eager = _writer_error(op, *[t.clone() if t is cache else t for t in tensors])
        assert (eager is None) == name.endswith("fine"), name
        assert _writer_error(op, *[_without_data(t, lambda x: x.to("meta")) for t in tensors]) == eager, name
        fake_mode = FakeTensorMode()
        fakes = [_without_data(t, fake_mode.from_tensor) for t in tensors]
        with fake_mode:
            assert _writer_error(op, *fakes) == eager, name


def test_pack_of_an_empty_page_names_latent_kv():
    """A page size of 0 is latent_kv's (the cache would be the function's own)."""
    for shape in ((2, 0, 512), (2, 1, 0, 512)):
        with pytest.raises(ValueError, match=re.escape(f"latent_kv: expected page_size >= 1, got shape {shape}")):
            torch_ops.nvfp4_quantize_pack_sparse_mla_cache(torch.zeros(shape, dtype=torch.bfloat16))


def test_writers_reject_an_input_on_another_device():
    """A meta tensor among CPU ones (the call then goes to the fake implementations) raises as the
    C++ checks do, instead of writing nothing."""
    cache = torch.zeros(2, 4, 384, dtype=torch.uint8)
    rows = torch.randn(8, 512).to(torch.bfloat16)
    slots = torch.arange(8, dtype=torch.int32)
    before = cache.clone()
    with pytest.raises(ValueError, match="slot_mapping: expected a tensor on cpu"):
        torch_ops.nvfp4_quantize_append_sparse_mla_cache(rows, slots.to("meta"), cache)
    with pytest.raises(ValueError, match="latent_kv: expected a tensor on cpu"):
        torch_ops.nvfp4_quantize_append_sparse_mla_cache(rows.to("meta"), slots, cache)
    with pytest.raises(ValueError, match="latent_kv: expected a tensor on cpu"):
        torch.ops.cake.nvfp4_pack_cache(rows.view(2, 4, 512).to("meta"), cache)
    assert torch.equal(cache, before)
