import os

if os.environ.get("PYTEST_XDIST_WORKER"):  # two workers on two cores: more threads would only spin against each other
    os.environ["OMP_NUM_THREADS"] = "1"
os.environ.setdefault("OMP_NUM_THREADS", "2")
# promotion signs with a key created on first use under $XDG_CONFIG_HOME/h3gates: the tests' own, never the
# user's; one for the whole run, shared by the xdist workers (a workspace one worker built and signed is
# verified by tests on the other), created safely by whichever process comes first
_run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
if _run:
    _cfg = os.path.join(__import__("tempfile").gettempdir(), f"h3gates-test-config.{_run}")
    os.makedirs(_cfg, mode=0o700, exist_ok=True)
    os.environ["XDG_CONFIG_HOME"] = _cfg
else:
    os.environ["XDG_CONFIG_HOME"] = __import__("tempfile").mkdtemp(prefix="h3gates-test-config.")
# GPU leases (h3gates.core.lease): a lease is held for the life of the process that takes it (a job is a
# process), and a test that runs a job in-process (the fc2 study's main) holds it until its xdist worker
# exits: another worker waiting for the same GPU then waited for the whole run (the GPU test files hung on
# the H200 under -n 2 and -n 4). Each test process leases from its own lock folder: the workers share the
# GPU, and the jobs of a snakemake run inside one worker still take turns on it.
os.environ["H3GATES_LEASE_DIR"] = os.path.join(
    __import__("tempfile").gettempdir(),
    f"h3gates-test-leases.{_run or os.getpid()}.{os.environ.get('PYTEST_XDIST_WORKER', 'main')}",
)
os.environ.pop("H3GATES_KEY", None)
os.environ.pop("H3GATES_TRUSTED_KEYS", None)

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
torch.manual_seed(0)

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def pytest_addoption(parser):
    parser.addoption(
        "--full",
        action="store_true",
        help="with no paths given, also run the workflow tests marked slow (CI runs them: .ci/run)",
    )


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped without one)")
    config.addinivalue_line(
        "markers",
        "slow: workflow runs through snakemake (minutes); left out of a plain `pytest` unless also smoke",
    )
    config.addinivalue_line(
        "markers", "smoke: a slow test a plain `pytest` still runs (the tiny quick start, a bad config refused)"
    )


def pytest_collection_modifyitems(config, items):
    """A plain `python -m pytest` (no paths, no -m, no --full) runs the unit tests (among them the snakemake
    runs of tests/test_added_candidate.py and the rung-1 faults of test_value_paths.py) and the slow tests
    marked smoke (the README's tiny ladder, a bad config refused before any job): about 5 minutes on 2 cores.
    The rest of the workflow tests run with `-m slow`, `--full`, or by naming their file or test; CI runs
    both (.ci/run)."""
    if config.getoption("--full") or config.option.markexpr or config.args_source != pytest.Config.ArgsSource.TESTPATHS:
        return
    keep = [i for i in items if "slow" not in i.keywords or "smoke" in i.keywords]
    if len(keep) < len(items):
        kept = {id(i) for i in keep}
        config.hook.pytest_deselected(items=[i for i in items if id(i) not in kept])
    # the smoke workflow runs first: a worker climbs while the other takes the unit tests
    items[:] = [i for i in keep if "smoke" in i.keywords] + [i for i in keep if "smoke" not in i.keywords]


@pytest.fixture(scope="session")
def ladder(tmp_path_factory, worker_id):
    """The CI ladder of the three candidates (`snakemake all` with config/ci.yaml), climbed once per test run
    and shared by the workers (test_workflow.py, test_run_cache.py); its console is in climb.console."""
    from workflow_util import shared_workspace

    return shared_workspace(tmp_path_factory, worker_id, "ladder", "all")
