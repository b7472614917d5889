"""The kernel override (docs/contract.md section 9; torch_ops.set_prefill_kernel_override and the
CAKE_PREFILL_KERNEL / CAKE_PREFILL_VARIANT environment variables): one validated value held in C++."""
import os
import subprocess
import sys

import pytest

import torch_ops
from helpers import HAS_CUDA, CacheSpec, assert_matches_reference, make_problem
from torch_ops import _C

NONE = {"kernel": None, "variant": None}


@pytest.fixture(autouse=True)
def restore_override():
    before = torch_ops.get_prefill_kernel_override()
    yield
    torch_ops.set_prefill_kernel_override(**before)


@pytest.mark.parametrize("kernel_text,variant_text,expected", [
    (None, None, NONE),
    ("", "", NONE),
    ("portable", None, {"kernel": "portable", "variant": None}),
    ("hopper", "", {"kernel": "hopper", "variant": None}),
    ("hopper_small", None, {"kernel": "hopper_small", "variant": None}),
    (None, "2,1", {"kernel": None, "variant": (2, 1)}),
    ("portable", "3,2", {"kernel": "portable", "variant": (3, 2)}),
])
def test_environment_values_parse(kernel_text, variant_text, expected):
    assert _C.parse_prefill_kernel_override(kernel_text, variant_text) == expected


@pytest.mark.parametrize("kernel_text,variant_text,message", [
    ("sm100", None, "CAKE_PREFILL_KERNEL: expected 'hopper', 'portable' or 'hopper_small', got 'sm100'"),
    ("hopper-small", None, "CAKE_PREFILL_KERNEL: expected 'hopper', 'portable' or 'hopper_small'"),
    ("Portable", None, "CAKE_PREFILL_KERNEL"),
    ("cpu", None, "CAKE_PREFILL_KERNEL"),
    (None, "2", "CAKE_PREFILL_VARIANT: expected 'stages,k_tiles'"),
    (None, "2,1,3", "CAKE_PREFILL_VARIANT: expected 'stages,k_tiles'"),
    (None, "a,b", "CAKE_PREFILL_VARIANT: expected 'stages,k_tiles'"),
    (None, "2,1 ", "CAKE_PREFILL_VARIANT: expected 'stages,k_tiles'"),
    (None, "9,1", r"CAKE_PREFILL_VARIANT: expected \(stages, k_tiles\) of a compiled portable instance"),
    (None, "-2,1", "CAKE_PREFILL_VARIANT"),
    (None, "99999999999999999999,1", "CAKE_PREFILL_VARIANT: expected 'stages,k_tiles' \\(two integers\\), got "
                                     "'99999999999999999999,1'"),
    (None, "2,4294967297", "CAKE_PREFILL_VARIANT: expected 'stages,k_tiles' \\(two integers\\)"),
    ("hopper", "2,1", "CAKE_PREFILL_VARIANT: picks a portable kernel instance"),
    ("hopper_small", "2,1", "CAKE_PREFILL_VARIANT: picks a portable kernel instance, which contradicts "
                            "CAKE_PREFILL_KERNEL = 'hopper_small'"),
])
def test_bad_environment_values_raise_naming_the_variable(kernel_text, variant_text, message):
    with pytest.raises(ValueError, match=message):
        _C.parse_prefill_kernel_override(kernel_text, variant_text)


@pytest.mark.parametrize("kwargs", [
    {}, dict(kernel="portable"), dict(kernel="hopper"), dict(kernel="hopper_small"), dict(variant=(2, 1)),
    dict(variant=[3, 2]),
    dict(kernel="portable", variant=(3, 2)),
])
def test_set_and_get_round_trip(kwargs):
    torch_ops.set_prefill_kernel_override(**kwargs)
    got = torch_ops.get_prefill_kernel_override()
    variant = kwargs.get("variant")
    assert got == {"kernel": kwargs.get("kernel"), "variant": None if variant is None else tuple(variant)}
    torch_ops.set_prefill_kernel_override(**got)
    assert torch_ops.get_prefill_kernel_override() == got


@pytest.mark.parametrize("kwargs,message", [
    (dict(kernel="sm100"), "kernel: expected 'hopper', 'portable' or 'hopper_small'"),
    (dict(kernel="cpu"), "kernel: expected 'hopper', 'portable' or 'hopper_small'"),
    (dict(kernel=1), "kernel: expected None, 'hopper', 'portable' or 'hopper_small'"),
    (dict(variant="2,1"), r"variant: expected None or \(stages, k_tiles\)"),
    (dict(variant=(2,)), r"variant: expected None or \(stages, k_tiles\)"),
    (dict(variant=(2, 1, 1)), r"variant: expected None or \(stages, k_tiles\)"),
    (dict(variant=(2.0, 1)), r"variant: expected None or \(stages, k_tiles\)"),
    (dict(variant=(True, 1)), r"variant: expected None or \(stages, k_tiles\)"),
    (dict(variant=(9, 1)), r"variant: expected \(stages, k_tiles\) of a compiled portable instance"),
    (dict(variant=(0, 0)), "variant"),
    (dict(variant=(2 ** 70, 1)), r"variant: expected \(stages, k_tiles\) of a compiled portable instance, got \(1180591620717411303424, 1\)"),
    (dict(variant=(2, -2 ** 64)), r"variant: expected \(stages, k_tiles\) of a compiled portable instance"),
    (dict(kernel="hopper", variant=(2, 1)), "variant: picks a portable kernel instance"),
    (dict(kernel="hopper_small", variant=(3, 2)), "variant: picks a portable kernel instance"),
])
def test_bad_values_raise_and_leave_the_override(kwargs, message):
    torch_ops.set_prefill_kernel_override(kernel="portable")
    with pytest.raises(ValueError, match=message):
        torch_ops.set_prefill_kernel_override(**kwargs)
    assert torch_ops.get_prefill_kernel_override() == {"kernel": "portable", "variant": None}


def test_context_manager_restores():
    torch_ops.set_prefill_kernel_override(variant=(3, 2))
    with torch_ops.prefill_kernel_override(kernel="portable"):
        assert torch_ops.get_prefill_kernel_override() == {"kernel": "portable", "variant": None}
        with torch_ops.prefill_kernel_override(kernel="hopper"):
            assert torch_ops.get_prefill_kernel_override() == {"kernel": "hopper", "variant": None}
        assert torch_ops.get_prefill_kernel_override() == {"kernel": "portable", "variant": None}
    assert torch_ops.get_prefill_kernel_override() == {"kernel": None, "variant": (3, 2)}
    with pytest.raises(KeyError):
        with torch_ops.prefill_kernel_override(variant=(2, 1)):
            raise KeyError("inside")
    assert torch_ops.get_prefill_kernel_override() == {"kernel": None, "variant": (3, 2)}
    with pytest.raises(ValueError, match="kernel"):
        with torch_ops.prefill_kernel_override(kernel="sm100"):
            pass
    assert torch_ops.get_prefill_kernel_override() == {"kernel": None, "variant": (3, 2)}


def _import_with(env):
    code = "import torch_ops; print(torch_ops.get_prefill_kernel_override())"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CAKE_PREFILL_")}
    environment.update(env)
    return subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=120)


def test_compiled_calls_recompile_when_the_override_changes_only():
    """A compiled prefill and decode recompile when the override changes, and not when it is set to
    the value in force: a graph compiled under an override serves again when that override is back
    (toggled with the context manager a dozen times: two graphs, no recompile limit reached, so a
    fullgraph function keeps working)."""
    import torch
    from torch._dynamo.testing import CompileCounter

    problem = make_problem(num_tokens=4, num_heads=16, topk=100, main=CacheSpec(4, 64), device="cpu", seed=71)
    output, out_lse = torch.empty(4, 16, 512, dtype=torch.bfloat16), torch.empty(4, 16)
    torch._dynamo.reset()
    for call in (torch_ops.sparse_mla_prefill, torch_ops.sparse_mla_decode):
        counter = CompileCounter()
        compiled = torch.compile(lambda q, c, i, o, l: call(q, c, i, o, l, 0.05, num_splits=1)
                                 if call is torch_ops.sparse_mla_decode else call(q, c, i, o, l, 0.05),
                                 fullgraph=True, backend=counter)
        torch_ops.set_prefill_kernel_override()
        compiled(problem.q, problem.kv_cache, problem.indices, output, out_lse)
        torch_ops.set_prefill_kernel_override()  # the value in force: nothing to recompile
        compiled(problem.q, problem.kv_cache, problem.indices, output, out_lse)
        assert counter.frame_count == 1
        for _ in range(12):
            with torch_ops.prefill_kernel_override(kernel="portable"):
                compiled(problem.q, problem.kv_cache, problem.indices, output, out_lse)
            compiled(problem.q, problem.kv_cache, problem.indices, output, out_lse)
        assert counter.frame_count == 2


def test_environment_is_read_at_import():
    done = _import_with({"CAKE_PREFILL_KERNEL": "portable", "CAKE_PREFILL_VARIANT": "3,2"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "{'kernel': 'portable', 'variant': (3, 2)}"
    failed = _import_with({"CAKE_PREFILL_VARIANT": "2;1"})
    assert failed.returncode != 0
    assert "ValueError: CAKE_PREFILL_VARIANT: expected 'stages,k_tiles' (two integers), got '2;1'" in failed.stderr


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("kernel", ["hopper", "hopper_small"])
def test_hopper_override_requires_a_device_that_runs_it(kernel):
    """The overrides "hopper" and "hopper_small" (the same) require the Hopper kernels, then choose
    as the device does by default: the 64-head kernel for its shapes, the small-heads kernel for
    the rest (tests/test_hopper_small.py checks that one against the reference)."""
    problem = make_problem(num_tokens=70, num_heads=128, topk=90, main=CacheSpec(4, 64), device="cuda", seed=5, sink=1.0)
    details = torch_ops.cake_sparse_mla_sm120_dsv4_nvfp4_plan_prefill_details
    with torch_ops.prefill_kernel_override():
        runs_hopper = problem.run(head_tiles=4)[2]["kernel"] == "hopper"
        default_plans = [details(num_tokens=70, num_heads=heads, topk=90, device="cuda", head_tiles=head_tiles)
                         for heads, head_tiles in ((48, None), (128, None), (128, 2))]
    with torch_ops.prefill_kernel_override(kernel=kernel):
        if runs_hopper:
            output, out_lse, plan = problem.run()
            assert plan["kernel"] == "hopper" and plan["head_tiles"] == 4
            assert_matches_reference(output, out_lse, *problem.reference())
            # A shape the 64-head kernel does not serve: the small-heads kernel, as by default.
            output, out_lse, plan = problem.run(head_tiles=2)
            assert plan["kernel"] == "hopper_small"
            assert_matches_reference(output, out_lse, *problem.reference())
            plans = [details(num_tokens=70, num_heads=heads, topk=90, device="cuda", head_tiles=head_tiles)
                     for heads, head_tiles in ((48, None), (128, None), (128, 2))]
            assert plans == default_plans
            assert [p["kernel"] for p in plans] == ["hopper_small", "hopper", "hopper_small"]
            # The registered decode op, called without the wrapper's planner, runs under it and matches.
            output, out_lse = problem.run_decode_op(num_splits=2, head_tiles=4)
            assert_matches_reference(output, out_lse, *problem.reference())
        else:
            with pytest.raises(ValueError, match=f"kernel override: '{kernel}' is set"):
                problem.run()
            with pytest.raises(ValueError, match=f"kernel override: '{kernel}' is set"):
                problem.run_decode_op(num_splits=2, head_tiles=4)

