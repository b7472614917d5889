"""The NVFP4 byte format and the writers (docs/contract.md sections 3, 5 and 8): known vector,
rounding, saturation, signs, non-finite inputs, round trip, view independence. Run on every
available device."""
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_ops
from helpers import DEVICES, cache_view, random_latent
from torch_ops.reference import cache_rows_bytes, nvfp4_quantize_reference


def pack_rows(rows: torch.Tensor, device) -> torch.Tensor:
    """Quantize [N, 512] bf16 rows into a 3-D cache with one token per page."""
    return torch_ops.nvfp4_quantize_pack_sparse_mla_cache(rows.to(device).view(-1, 1, 512), kv_layout="NHD")


def first_group(values, device, scale_value=None):
    rows = torch.zeros(1, 512, dtype=torch.bfloat16)
    rows[0, :16] = torch.tensor(values, dtype=torch.float32).to(torch.bfloat16)
    data, scale = cache_rows_bytes(pack_rows(rows, device), torch.tensor([0]))
    return data[0], scale[0]


@pytest.mark.parametrize("device", DEVICES)
def test_known_vector(device):
    data, scale = first_group([0, -0.0, 0.5, -0.5, 1, -1, 1.5, -1.5, 2, -2, 3, -3, 4, -4, 6, -6], device)
    assert data[:8].tolist() == [0x80, 0x91, 0xA2, 0xB3, 0xC4, 0xD5, 0xE6, 0xF7]
    assert scale[0].item() == 0x38


@pytest.mark.parametrize("device", DEVICES)
def test_e2m1_ties_round_to_even(device):
    # amax 6 -> scale 1, so the values are the codes' own grid; ties go to the even code.
    values = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5.0, 0.0]
    data, scale = first_group(values, device)
    assert scale[0].item() == 0x38
    codes = [(b >> (4 * k)) & 0xF for b in data[:8].tolist() for k in (0, 1)]
    assert codes == [0, 2, 2, 4, 4, 6, 6, 7, 8, 10, 10, 12, 12, 14, 14, 0]


@pytest.mark.parametrize("device", DEVICES)
def test_sign_of_zero_kept(device):
    # scale 1 (amax 6): -0.1 rounds to zero and keeps its sign (code 8); +0.1 is code 0.
    data, _ = first_group([-0.1, 0.1, -0.0, 6.0] + [0.0] * 12, device)
    assert data[0].item() == 0x08
    assert data[1].item() & 0xF == 0x8  # -0.0


@pytest.mark.parametrize("device", DEVICES)
def test_e4m3_scale_rounding_and_saturation(device):
    # amax / 6 = 448 * 4 saturates at 448 (0x7E); codes saturate at +-6.
    data, scale = first_group([6 * 448 * 4] + [-6 * 448 * 4] + [0.0] * 14, device)
    assert scale[0].item() == 0x7E
    assert data[0].item() == 0xF7
    # amax / 6 = 1.0625 is the tie between 1.0 (0x38) and 1.125 (0x39): even mantissa wins.
    _, scale = first_group([6 * 1.0625] + [0.0] * 15, device)
    assert scale[0].item() == 0x38
    # amax / 6 = 1.1875 ties between 1.125 (0x39) and 1.25 (0x3A): 0x3A.
    _, scale = first_group([6 * 1.1875] + [0.0] * 15, device)
    assert scale[0].item() == 0x3A
    # Subnormal scale: amax / 6 = 3 * 2^-9 exactly -> 0x03; all-zero group -> scale 0, codes 0.
    data, scale = first_group([6 * 3 * 2.0 ** -9] + [0.0] * 15, device)
    assert scale[0].item() == 0x03 and data[0].item() == 0x07
    data, scale = first_group([0.0] * 16, device)
    assert scale[0].item() == 0 and data[:8].tolist() == [0] * 8


@pytest.mark.parametrize("device", DEVICES)
def test_non_finite_inputs(device):
    """A NaN gives its group the E4M3 NaN scale (0x7F) and zero codes; +-inf saturates the scale
    (448, 0x7E) and its own code (+-6). Groups without a NaN are unaffected."""
    rows = torch.randn(4, 512).to(torch.bfloat16)
    rows[0, 3] = float("nan")
    rows[1, 5] = float("inf")
    rows[2, 7] = float("-inf")
    rows[3, :16] = float("nan")
    cache = pack_rows(rows, device)
    data, scale = cache_rows_bytes(cache, torch.arange(4))
    assert scale[0, 0].item() == 0x7F and scale[3, 0].item() == 0x7F
    assert data[0, :8].eq(0).all() and data[3, :8].eq(0).all()
    assert scale[1, 0].item() == 0x7E and scale[2, 0].item() == 0x7E
    assert data[1, 2].item() & 0xF0 == 0x70 and data[2, 3].item() & 0xF0 == 0xF0  # +6 and -6
    clean = rows.clone()
    clean[0, :16] = 1.0
    clean[3, :16] = 1.0
    clean_data, clean_scale = cache_rows_bytes(pack_rows(clean, device), torch.arange(4))
    assert torch.equal(scale[:, 1:], clean_scale[:, 1:]) and torch.equal(data[:, 8:], clean_data[:, 8:])
    ref_data, ref_scale = nvfp4_quantize_reference(rows)
    assert torch.equal(data, ref_data) and torch.equal(scale, ref_scale)


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), log_scale=st.floats(-12, 12))
def test_writer_matches_reference_quantizer(device, seed, log_scale):
    g = torch.Generator().manual_seed(seed)
    rows = (random_latent(32, g).float() * 2.0 ** log_scale).to(torch.bfloat16)
    data, scale = cache_rows_bytes(pack_rows(rows, device), torch.arange(32))
    ref_data, ref_scale = nvfp4_quantize_reference(rows)
    assert torch.equal(data, ref_data)
    assert torch.equal(scale, ref_scale)
    assert scale[:, 28:].eq(0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_round_trip_error_bound(device):
    g = torch.Generator().manual_seed(1)
    rows = random_latent(256, g)
    back = torch_ops.nvfp4_dequantize_sparse_mla_cache(pack_rows(rows, device), torch.arange(256)).cpu()
    x = rows.float()
    assert torch.equal(back[:, 448:], x[:, 448:]), "RoPE must round-trip bit for bit"
    # Per group: |x - deq| <= half an E2M1 step at the largest magnitude (1 * scale) plus the
    # scale's own rounding (the scale is within 1/16 of amax/6, so codes stay within range).
    groups = (x[:, :448] - back[:, :448]).abs().view(256, 28, 16)
    amax = x[:, :448].abs().view(256, 28, 16).amax(-1)
    assert (groups.amax(-1) <= amax / 6 * 1.07 + 1e-30).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("page_size", [1, 2, 48, 64])
def test_views_and_padding_hold_identical_bytes(device, page_size):
    g = torch.Generator().manual_seed(page_size)
    latent = random_latent(3 * page_size, g).view(3, page_size, 512).to(device)
    hnd = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(latent, kv_layout="HND")
    nhd = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(latent.unsqueeze(2), kv_layout="NHD")
    assert hnd.shape == (3, 1, page_size, 384) and nhd.shape == (3, page_size, 1, 384)
    assert torch.equal(hnd.flatten(), nhd.flatten())
    slots = torch.arange(3 * page_size)
    expected = torch_ops.nvfp4_dequantize_sparse_mla_cache(hnd, slots)
    for view in ("3d", "HND", "NHD"):
        for pad in (0, 16, 400):
            viewed = cache_view(hnd, view, pad, g)
            assert torch.equal(torch_ops.nvfp4_dequantize_sparse_mla_cache(viewed, slots), expected)
            assert torch.equal(cache_rows_bytes(viewed, slots)[0], cache_rows_bytes(hnd, slots)[0])


@pytest.mark.parametrize("device", DEVICES)
def test_page_split_layout(device):
    """Data rows first, then scale rows, inside each page."""
    g = torch.Generator().manual_seed(3)
    latent = random_latent(2 * 5, g).view(2, 5, 512)
    cache = torch_ops.nvfp4_quantize_pack_sparse_mla_cache(latent.to(device)).cpu().view(2, 5 * 384)
    ref_data, ref_scale = nvfp4_quantize_reference(latent.view(10, 512))
    for page in range(2):
        for row in range(5):
            slot = page * 5 + row
            assert torch.equal(cache[page, row * 352:(row + 1) * 352], ref_data[slot])
            assert torch.equal(cache[page, 5 * 352 + row * 32:5 * 352 + (row + 1) * 32], ref_scale[slot])


def test_gather_page_division_by_multiply_and_shift():
    """The CUDA gathers take a slot's page by a multiply and a shift (slot_page_divisor): the same
    page as the division for every page size and for slots 0 .. 2^31 - 1, page boundaries and
    the largest slot included; page sizes of 2^31 and more put every slot in page 0."""
    rng = random.Random(7)
    largest = 2**31 - 1
    sizes = list(range(1, 1025)) + [1031, 4096, 65536, 65537, 2**20 + 7, 3 * 2**27, 2**30, 2**30 + 1,
                                     2**31 - 2, largest, 2**31, 2**31 + 5, 2**40]
    for page_size in sizes:
        slots = {0, largest, largest - 1}
        for k in (1, 2, 3, largest // page_size, largest // page_size - 1):
            for delta in (-1, 0, 1):
                if 0 <= k * page_size + delta <= largest:
                    slots.add(k * page_size + delta)
        slots.update(rng.randrange(0, largest + 1) for _ in range(64))
        slots = sorted(slots)
        pages = torch_ops._C.divided_slot_pages(page_size, slots)
        assert pages == [slot // page_size for slot in slots], page_size


def test_gather_row_offsets_in_32_bit_slot_arithmetic():
    """The Hopper kernels' per-block address math (slot_row_offsets: the page by multiply and shift,
    page and row in 32 bits) gives every slot's data row and scale row at the format's byte offsets
    (page * stride, then page_size data rows of 352 bytes, then 32-byte scale rows), for page sizes
    from 1 to beyond 2^31, strides with and without padding, and slots up to 2^31 - 1."""
    rng = random.Random(11)
    largest = 2**31 - 1
    sizes = [1, 2, 3, 7, 16, 63, 64, 65, 256, 1000, 1024, 4096, 65537, 2**20 + 7, 2**30 + 1, largest, 2**31, 2**40]
    for page_size in sizes:
        for pad in (0, 16, 4096):
            stride = page_size * 384 + pad
            slots = {0, largest, largest - 1, min(page_size, largest), min(page_size - 1, largest)}
            slots.update(rng.randrange(0, largest + 1) for _ in range(32))
            slots.update(k * page_size + d for k in (1, 2, 5) for d in (-1, 0, 1) if 0 <= k * page_size + d <= largest)
            slots = sorted(slots)
            got = torch_ops._C.slot_row_offsets(page_size, stride, slots)
            want = [((s // page_size) * stride + (s % page_size) * 352,
                     (s // page_size) * stride + page_size * 352 + (s % page_size) * 32) for s in slots]
            assert [tuple(o) for o in got] == want, (page_size, pad)
