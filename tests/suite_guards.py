# SPDX-License-Identifier: MIT
"""What ``tests/conftest.py`` uses to keep the suite honest (imported as ``suite_guards``).

* :func:`tree_state` / :func:`tree_changes`: a snapshot of the repository's files (mtime, size, mode) taken before
  and after the session, so a test that writes into the source tree fails the run instead of dirtying it.
* :func:`torch_tests`: which tests of a module need PyTorch, read from the source (no import), so the ``torch``
  marker follows the code instead of a hand-kept list.
* :data:`SLOW_TESTS`: the tests marked ``slow`` (one list here rather than decorators spread over files that
  other branches edit); :func:`defines_test` lets a test check that every entry still names a test.
* :data:`CI_ALLOWED_SKIPS` / :func:`ci_allows_skip`: the only skips a CI run (``CI=true``) accepts; any other skip
  fails it, so a component CI should have installed cannot go missing unnoticed.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

#: Directories the guard never looks into: git's data, and caches the tools keep (all git-ignored). Hypothesis's
#: example database (``.hypothesis/``) is a cache in the working directory by design and is allowed.
IGNORED_DIRS = frozenset({".git", ".hypothesis", ".pytest_cache", "__pycache__"})

#: Tests marked ``slow`` (``-m "not slow"`` for a quick run; CI runs them). Each took 10 s or more in a whole-suite
#: run on the 2-core development machine under load (2026-11-23: 858 s in all, these about 470 s of it); add a
#: test here when it takes as long. Parametrized tests are named without their ``[id]``.
SLOW_TESTS = frozenset({
    "tests/serve/test_serve.py::test_pages_a_stopped_server_left_undrawn_are_drawn_at_the_next_start",  # 24 s at load 3
    "tests/scoring/test_peer_report.py::test_score_odir_cv_reports_the_selected_strengths",  # 51 s (97 s on 2 busy cores)
    "tests/scale/test_scale_fuzz.py::test_mutated_archives_give_clean_outcomes",  # 202 s
    "tests/scale/test_scale_leaderboard.py::test_dask_worker_killed_mid_run_every_upload_scored_once",  # 45 s
    "tests/scale/test_scale_leaderboard.py::test_new_protocol_or_bigger_limits_rescore",  # 41 s
    "tests/producers/test_producer_resume.py::test_sigkill_after_member_1_then_rerun_trains_only_the_rest",  # 36 s
    "tests/scale/test_scale_leaderboard.py::test_leaderboard_rows_ranks_and_cache",  # 24 s
    "tests/producers/test_tune.py::test_sigkilled_study_resumes_with_its_finished_trials",  # 51 s
    "tests/scale/test_scale_leaderboard.py::test_killed_run_resumes_where_it_stopped",  # 24 s
    "tests/archive_schema/test_archive_roundtrip.py::test_iter_probs_blocks_concatenate_to_probs",  # 20 s
    "tests/scoring/test_calibrated_and_dee.py::test_score_with_ensemble_adds_the_dee_curve_to_json_and_html",  # 20 s
    "tests/archive_schema/test_archive_roundtrip.py::test_round_trip",  # 12 s
    "tests/test_cli_score.py::test_subprocess_exit_1_reference_mismatch",  # 10 s
    "tests/scale/test_scale_sandbox.py::test_child_environment_and_filesystem_are_closed",  # 10 s
    "tests/test_suite_guards.py::test_torch_marker_follows_the_imports",  # 14 s: two pytest subprocesses
    "tests/test_suite_guards.py::test_a_test_writing_into_the_source_tree_fails_the_run",  # 13 s: two as well
    "tests/test_api_docs.py::test_readme_torch_snippet_runs",  # 20 s: torch and ubench score in subprocesses
    # issue #28: the README's commands in a copy of the clone (5 subprocesses, 2 import torch; 22 s of CPU), and
    # the figures' text measured in headless Chromium (two pages scored and drawn; 13 s of CPU)
    "tests/test_readme_fresh_clone.py::test_the_readme_commands_run_in_a_copy_of_the_clone_with_nothing_beside_it",
    "tests/scoring/test_figures_in_browser.py::test_figure_text_is_readable_at_100_percent",
    "tests/metrics/test_interval_coverage.py::test_95_percent_intervals_cover_the_population_values_at_the_nominal_rate",  # 15-25 s
    # ubench serve against hostile clients (issue #25): real servers in subprocesses, scoring in the sandbox; the
    # seconds were measured at load 13 on the 2 cores (about a fifth of that on an idle machine)
    "tests/serve/test_serve_hostile.py::test_hidden_results_and_every_routes_authentication",  # 58 s
    "tests/serve/test_serve_hostile.py::test_second_server_takes_no_live_claim_and_a_lone_one_cleans_up",  # 57 s
    "tests/serve/test_serve_hostile.py::test_parallel_uploads_hold_the_daily_quota_and_the_concurrency_limit",  # 42 s
    "tests/serve/test_serve_hostile.py::test_board_is_materialised_when_scored_and_served_without_the_records",  # 43 s
    "tests/serve/test_serve_hostile.py::test_unusable_data_dir_or_database_is_one_line_and_exit_2",  # 35 s
    "tests/serve/test_serve_hostile.py::test_upload_reaches_the_board_while_replicates_are_computed",  # 18 s at load 7
    # issue #27 item 8: the routes' module server (two uploads scored, their reports drawn; 19 s at load 7)
    "tests/serve/test_serve_routes.py::test_every_refusal_is_its_status_and_one_line_naming_what_is_wrong",
    # a 2-worker LocalCluster started for the module, three reports each way (26 s at load 12)
    "tests/scoring/test_score_parallel.py::test_cluster_report_equals_the_one_process_report",
    # issue #30, seconds on 2 cores under another helper's benchmark: chains checked against the NumPyro oracle,
    # the warm-up learning a scale, laplace-torch's full last-layer Laplace
    "tests/producers/test_posterior_oracle.py::test_torch_chain_agrees_with_numpyro_nuts",  # 79 s (nuts) + 40 s (hmc)
    "tests/producers/test_posterior_oracle.py::test_jax_producer_chain_agrees_with_numpyro_nuts",  # 45 s
    "tests/producers/test_hmc_warmup.py::test_chain_learns_the_scales_and_samples_them",  # 17 s (nuts)
    # 13 s (full):
    "tests/producers/test_laplace_parity.py::test_marginal_likelihood_matches_laplace_torch_and_the_producer_takes_its_maximum",
    "tests/producers/test_laplace_parity.py::test_last_layer_ggn_laplace_matches_laplace_torch",  # 12 s (full)
})

#: Skip reasons a CI run (``CI=true``) accepts, each with why the CI machine cannot have what is missing: an NVIDIA
#: GPU, and TensorRT (the ``edge-trt`` extra, which needs one). Matched with ``re.search`` against the skip's reason.
#: Every other skip in tests/ is a component CI installs (``.ci/run``: the ``test,torch,jax`` extras; Debian's
#: chromium, postgresql, dataset-fashion-mnist, curl, g++; the kernel's Landlock; ``../shared`` beside the clone),
#: so under CI it fails the test: torch, jax, optax, blackjax, onnx, onnxruntime, scikit-learn, arviz, distributed,
#: pandas, laplace, optuna, mlflow, lightning, nbformat/nbclient/ipykernel, fastapi, uvicorn, sqlalchemy, alembic,
#: httpx, psycopg, playwright ("could not import ..."); Debian's chromium, PostgreSQL binaries, runuser, curl, a C++
#: compiler; Landlock; the Fashion-MNIST files and the shared MNIST/notMNIST copies.
CI_ALLOWED_SKIPS: tuple[tuple[str, str], ...] = (
    (r"\bCUDA\b", "no NVIDIA GPU on the CI machine (torch.cuda, onnxruntime's CUDA provider)"),
    (r"could not import 'tensorrt'|\bTensorRT\b", "TensorRT is the edge-trt extra, which needs an NVIDIA GPU"),
)


def ci_allows_skip(reason: str) -> bool:
    """Whether a skip with this reason may pass a CI run (it matches an entry of :data:`CI_ALLOWED_SKIPS`)."""
    return any(re.search(pattern, reason) for pattern, _ in CI_ALLOWED_SKIPS)


def in_ci(environ=os.environ) -> bool:
    """Whether this run is CI's (``CI=true``, as CI sets it; ``1`` too)."""
    return environ.get("CI", "").strip().lower() in ("true", "1")


def refuse_skip_in_ci(report, environ=os.environ) -> None:
    """Under CI, turn a skipped test or collection report whose reason is not on the allow-list into a failure
    naming the reason (xfail, reported as skipped with ``wasxfail``, is left alone); outside CI change nothing."""
    if not report.skipped or hasattr(report, "wasxfail") or not in_ci(environ):
        return
    reason = skip_reason(report.longrepr)
    if not ci_allows_skip(reason):
        report.outcome = "failed"
        report.longrepr = (f"CI=true, and this skipped for a reason not on the CI allow-list "
                           f"(tests/suite_guards.py CI_ALLOWED_SKIPS): {reason}; .ci/run must install what it needs")


def skip_reason(longrepr) -> str:
    """The reason of a skipped report (``(path, line, "Skipped: reason")`` or a plain string), without the prefix."""
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


#: Top-level modules whose import makes a test a ``torch`` test.
TORCH_MODULES = frozenset({"torch", "torchvision"})


def _is_environment(dirpath: str) -> bool:
    """A virtual environment (``.venv/`` or any other name) is not source: pip and Python write there."""
    return os.path.isfile(os.path.join(dirpath, "pyvenv.cfg"))


def tree_state(root: Path, *, skip: tuple[Path, ...] = ()) -> dict[str, tuple[int, int, int] | None]:
    """Every file under ``root`` as ``relative path -> (mtime_ns, size, mode)``; directories as ``"dir/" -> None``.

    Directories in :data:`IGNORED_DIRS`, virtual environments and the paths in ``skip`` are left out (whole).
    Links are recorded, not followed.
    """
    root = Path(root)
    skipped = {os.path.normpath(p) for p in skip}
    state: dict[str, tuple[int, int, int] | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(
            d for d in dirnames
            if d not in IGNORED_DIRS and os.path.normpath(os.path.join(dirpath, d)) not in skipped
            and not _is_environment(os.path.join(dirpath, d))
        )
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir != ".":
            state[rel_dir + "/"] = None
        for name in filenames:
            if name in IGNORED_DIRS:  # a worktree's .git is a file
                continue
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            state[os.path.relpath(path, root)] = (st.st_mtime_ns, st.st_size, st.st_mode)
    return state


def tree_changes(before: dict, after: dict) -> list[str]:
    """Sorted lines ``added PATH`` / ``removed PATH`` / ``modified PATH`` between two :func:`tree_state` results."""
    lines = [f"added {p}" for p in after.keys() - before.keys()]
    lines += [f"removed {p}" for p in before.keys() - after.keys()]
    lines += [f"modified {p}" for p in before.keys() & after.keys() if before[p] != after[p]]
    return sorted(lines, key=lambda s: s.split(" ", 1)[1])


def _imports_torch(node: ast.AST) -> bool:
    """Whether ``node`` holds ``import torch``, ``from torch... import``, or ``importorskip("torch...")``."""
    for n in ast.walk(node):
        if isinstance(n, ast.Import) and any(a.name.split(".")[0] in TORCH_MODULES for a in n.names):
            return True
        if isinstance(n, ast.ImportFrom) and not n.level and (n.module or "").split(".")[0] in TORCH_MODULES:
            return True
        if isinstance(n, ast.Call) and n.args and isinstance(n.args[0], ast.Constant):
            func = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", None)
            if func == "importorskip" and str(n.args[0].value).split(".")[0] in TORCH_MODULES:
                return True
    return False


def torch_tests(source: str) -> tuple[bool, frozenset[str]]:
    """``(whole_module, names)``: whether the module imports torch outside any function (then every test in it
    needs torch), and the names of the module's functions (top level or in a class) that import it themselves."""
    tree = ast.parse(source)
    funcs = (ast.FunctionDef, ast.AsyncFunctionDef)
    names = set()
    whole = False
    for stmt in tree.body:
        if isinstance(stmt, funcs):
            if _imports_torch(stmt):
                names.add(stmt.name)
        elif isinstance(stmt, ast.ClassDef):
            for sub in stmt.body:
                if isinstance(sub, funcs) and _imports_torch(sub):
                    names.add(sub.name)
                elif not isinstance(sub, funcs) and _imports_torch(sub):
                    whole = True
        elif _imports_torch(stmt):
            whole = True
    return whole, frozenset(names)


def defines_test(source: str, name: str) -> bool:
    """Whether the module source defines a function ``name`` at top level or in a class."""
    tree = ast.parse(source)
    funcs = (ast.FunctionDef, ast.AsyncFunctionDef)
    for stmt in tree.body:
        if isinstance(stmt, funcs) and stmt.name == name:
            return True
        if isinstance(stmt, ast.ClassDef) and any(isinstance(f, funcs) and f.name == name for f in stmt.body):
            return True
    return False
