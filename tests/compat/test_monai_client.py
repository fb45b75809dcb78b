"""MONAI, unchanged, on nitorch_jit's kernels: its own tests of monai._C (BUILD_MONAI=1, the
plugin, an offline stand-in for its test-data download), and an A/B run of the transform files
that reach ``Resample`` under USE_COMPILED against MONAI's own compiled ``_C``.

MONAI's filtering / LLTM / CRF tests are left out: only its resampling is served. MONAI's own
_C is built once per run by the ``monai_own_c`` fixture (tests/conftest.py).
"""
import pytest

from tests.compat.clients import client_env, counts, run_pytest

# the quick tier leaves out: client processes (their own suites, imports of the clients)
pytestmark = pytest.mark.slow

CORE = ["tests/utils/test_enum_bound_interp.py", "tests/networks/layers/test_grid_pull.py",
        "tests/networks/blocks/warp/test_warp.py"]
TRANSFORMS = [f"tests/transforms/{f}.py" for f in (
    "test_resample_backends", "test_spacing", "test_rotate", "test_rotated", "test_zoomd",
    "test_rand_zoom", "test_rand_zoomd", "test_rand_rotate", "test_rand_rotated",
    "test_crop_foreground")]
PLUGINS = ["-p", "monai_offline"]


def _env(**extra):
    # one thread: MONAI's own _C (the A/B peer) has no parallel grain, and test_warp's
    # gradcheck makes ~30,000 tiny calls
    return client_env(BUILD_MONAI=1, OMP_NUM_THREADS=1, **extra)


def _by_file(outcomes, path):
    mod = path[:-3].replace("/", ".")
    return {k: v for k, v in outcomes.items() if k.startswith(mod + ".") or k.startswith(mod + "::")}


@pytest.mark.slow  # MONAI's own tests, a client process
def test_monai_own_resampling_tests(monai_tree):
    """test_enum_bound_interp 2/2, test_grid_pull 224/224, test_warp all but its itk case, at
    the default thread count: with the parallel grain (issue #19) test_warp's ~30,000 tiny
    calls take 13 s there, as at one thread (over 5 minutes before it)."""
    env = client_env(BUILD_MONAI=1)
    env.pop("OMP_NUM_THREADS", None)
    outcomes, log = run_pytest(["-p", "nitorch_jit.compat.pytest_plugin", *PLUGINS, *CORE],
                               monai_tree, env)
    assert counts(_by_file(outcomes, CORE[0])) == {"passed": 2}, log
    assert counts(_by_file(outcomes, CORE[1])) == {"passed": 224}, log
    warp = counts(_by_file(outcomes, CORE[2]))
    assert warp.get("failed", 0) == 0 and warp.get("error", 0) == 0, log
    assert warp["passed"] >= 12, log  # 4 low-power + 5 compiled-order cases + gradcheck + ...


def test_monai_without_shim_skips_compiled_tests(monai_tree):
    """The control: without the compat, MONAI's compiled tests skip (USE_COMPILED is False)."""
    outcomes, log = run_pytest([*PLUGINS, CORE[0], CORE[1]], monai_tree, _env())
    assert set(outcomes.values()) == {"skipped"}, log


@pytest.mark.slow
def test_monai_transforms_ab_against_monai_own_c(monai_tree, monai_own_c):
    """The transform files that reach Resample under USE_COMPILED, with the compat and with
    MONAI's own _C: the compat fails no case that MONAI's own build passes."""
    ours, log_ours = run_pytest(["-p", "nitorch_jit.compat.pytest_plugin", *PLUGINS,
                                 *TRANSFORMS], monai_tree, _env())
    theirs, log_theirs = run_pytest(["-p", "monai_own", *PLUGINS, *TRANSFORMS], monai_tree,
                                    _env(MONAI_OWN_C=monai_own_c))
    assert len(ours) >= 340, counts(ours)  # 343 cases in MONAI 1.5.0's files
    assert set(ours) == set(theirs)
    worse = sorted(k for k, v in ours.items()
                   if v in ("failed", "error") and theirs[k] not in ("failed", "error"))
    assert not worse, f"fail with the compat only: {worse}\n{log_ours}"
    print(f"\ncompat: {counts(ours)}; MONAI's own _C: {counts(theirs)}")
    print("failing with both:", sorted(k for k, v in ours.items() if v == "failed"))
