"""Shared fixtures: real example models saved in every format, and a CLI runner."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli_runs import CliResult, cli_command, run_cli, time_api_calls_once
from tests.golden_runs import GoldenRun, golden_runs
from tests.session_cache import CACHE_NAME, SessionCache, share_from, shared
from tests.tiers import mark_tiers
from tests.torchlib_once import keep_torchlib_registry

__all__ = ["CliResult", "cli_command", "run_cli", "note_messages", "note_codes", "ROOT",
           "default_signals"]

ROOT = Path(__file__).resolve().parents[1]

# In a pipe every step prints a progress line on stderr; the tests read stderr for the one-line
# errors and notes, so they run quiet (as `--quiet`), here and in the CLIs they start.
# tests/cli/test_progress.py checks the progress lines with it unset.
os.environ.setdefault("EXPORT_GELU_QUIET", "1")


def _is_xdist_controller(config: pytest.Config) -> bool:
    """pytest-xdist's controller process: it starts the workers and runs no test itself."""
    o = config.option
    return (not hasattr(config, "workerinput") and getattr(o, "dist", "no") != "no"
            and bool(getattr(o, "tx", None)) and not o.collectonly)


def pytest_configure(config: pytest.Config) -> None:
    """One timed run and no warm-up for the API's export/verify/compare_forms unless a test
    asks (tests/cli_runs.py; run_cli and cli_command do the same for the command line),
    before the test modules import them. Not in pytest-xdist's controller: it imports no test
    module, and importing the API there (torch with it, about 4 CPU seconds) would delay the
    workers' start."""
    if not _is_xdist_controller(config):
        time_api_calls_once()
    share_from(config)  # the session cache, for helpers that are no fixture


# torch's exporter builds its ATen-to-ONNX registry once per process instead of once per
# export (about a CPU second each; tests/torchlib_once.py): what an export writes is unchanged.
keep_torchlib_registry()


def _hypothesis_profiles() -> None:
    """The fuzzer's profiles (tests/passes/test_fuzz_rewrites.py): `ci`, the default (seeded:
    the same examples every run, so a failure in CI is a failure on your machine); `fast`
    (`make test-fast`); `nightly` (`make fuzz`: new examples each run, failures kept in
    .hypothesis/ and replayed first). max_examples is the main property's count; the others
    take a share of it. Choose one with `--hypothesis-profile NAME`."""
    from hypothesis import HealthCheck, settings

    common = dict(deadline=None, print_blob=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    settings.register_profile("ci", max_examples=500, derandomize=True, database=None,
                              **common)
    settings.register_profile("fast", max_examples=60, derandomize=True, database=None,
                              **common)
    settings.register_profile(
        "nightly", derandomize=False,
        max_examples=int(os.environ.get("EXPORT_GELU_FUZZ_EXAMPLES", "5000")), **common)
    settings.load_profile("ci")


_hypothesis_profiles()


def note_messages(report: dict) -> list[str]:
    """The words of a JSON report's notes (each note is {"code", "message"})."""
    return [n["message"] for n in report["notes"]]


def note_codes(report: dict) -> list[str]:
    """The codes of a JSON report's notes."""
    return [n["code"] for n in report["notes"]]


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory: pytest.TempPathFactory) -> SessionCache:
    """Files built once for every test, worker and session (tests/session_cache.py): under
    the pytest cache, or this session's temporary folder with `-p no:cacheprovider`."""
    built = shared()  # the pytest cache's folder (share_from, at configure)
    if built is not None:
        built.prune()  # entries of older sources, untouched for an hour
        return built
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the folder every worker of this run shares
    return SessionCache(base / CACHE_NAME)


@pytest.fixture(scope="session")
def saved_model(model_dir: Path, session_cache: SessionCache):
    """saved_model(example, format) → path of that example saved in that format: built once
    (session_cache), copied into this session's model folder (tests may write beside it)."""
    from examples.save_model import save

    copies: dict[tuple[str, str], Path] = {}

    def get(example: str, fmt: str) -> Path:
        key = (example, fmt)
        if key not in copies:
            name = f"{example}.{fmt}.pt"
            built = session_cache.file(name, lambda path: save(example, fmt, path))
            copies[key] = Path(shutil.copyfile(built, model_dir / name))
        return copies[key]

    return get


@pytest.fixture(scope="session")
def saved_real(tmp_path_factory: pytest.TempPathFactory, session_cache: SessionCache):
    """saved_real(name, fmt) → examples/real_models.py's `name` saved as 'exported' (keyword
    inputs, the library's output object) or 'torchscript': built once (session_cache),
    copied into this session's folder."""
    from examples.real_models import save_exported, save_torchscript

    folder = tmp_path_factory.mktemp("real_models")
    copies: dict[tuple[str, str], Path] = {}

    def get(name: str, fmt: str) -> Path:
        if (name, fmt) not in copies:
            saver = save_exported if fmt == "exported" else save_torchscript
            built = session_cache.file(f"{name}.{fmt}.pt",
                                       lambda path: saver(name, str(path)))
            copies[name, fmt] = Path(shutil.copyfile(built, folder / built.name))
        return copies[name, fmt]

    return get


@pytest.fixture(scope="session")
def golden_run(saved_model, session_cache: SessionCache) -> Callable[..., GoldenRun]:
    """golden_run(example, fmt, *flags) → `export-gelu MODEL FLAGS -o model.onnx --report
    report.json` on the bundled example, run once per scenario for every test, worker and
    session (tests/golden_runs.py): for tests that only read what it wrote."""
    return golden_runs(saved_model, session_cache)


@pytest.fixture(autouse=True)
def _cwd_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run from the repository root so `examples.models:…` factories import as users would."""
    monkeypatch.chdir(ROOT)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its tier, `unit`, `integration` or `e2e`, from what it uses
    (tests/tiers.py)."""
    mark_tiers(items, ROOT)


def default_signals() -> None:
    """`preexec_fn` for a CLI child the tests send Ctrl-C to: SIGINT handled as by default.

    A child inherits an ignored SIGINT across exec, and Python then installs no
    KeyboardInterrupt handler; pytest-xdist's workers ignore SIGINT, so without this a
    test's Ctrl-C would never reach the CLI under `make test` (`-n auto`).
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
