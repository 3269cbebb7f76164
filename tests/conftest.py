"""Shared fixtures, and the `e2e` and `slow` markers (registered in pyproject.toml).

The markers are applied here, from the lists below, so that no test file has to carry them:

* `e2e`: the test starts the program (`python -m gputop_diag`, or its `main` in a fresh
  interpreter) in a subprocess or on a pty, or drives a real service or system tool: Slurm,
  Prometheus (`prometheus`, `promtool`), the journal (`journalctl`, `systemd-journal-remote`),
  `dmesg`, `setpriv`. A test that only spawns a small helper (a job to watch, a fake probe, an
  import check) is not e2e; it is `slow` where it takes a second.
* `slow`: the test takes about a second or more (setup, call and teardown together), measured
  with `python -m pytest -q -n 2 --durations=0` on a 2-core machine. e2e tests are not repeated
  in SLOW.

An entry is a file name (`test_x.py`: every test in it) or `file::test_name` (every
parametrization of that test; `file::test_name[id]` for one). Tests that use a fixture named in
E2E_FIXTURES or SLOW_FIXTURES get the marker too (a new test against real Slurm, or on the
600 held-out cases, is marked without an entry). An entry that matches no test while its file
was collected whole is reported as a warning: a renamed test must be renamed here too.

The fast subset for development (the README): `python -m pytest -q -n 2 -m "not slow and not e2e"`.
To re-measure: `python -m pytest -q -n 2 --durations=0 -p no:randomly > /tmp/durations.txt`.
"""

import os
import subprocess
import sys
import warnings

import pytest

E2E = [
    # real services
    "test_fleet_prometheus.py",  # a real Prometheus (and node-exporter) scraping the exporter
    "test_fleet_tls.py",  # Prometheus behind TLS, openssl
    "test_slurm_real.py",  # a real single-node Slurm
    "test_exporter.py::test_promtool_accepts_the_exposition",
    "test_exporter.py::test_dcgm_labels_are_what_promtool_lints_and_why_they_are_optional",
    "test_kernlog_sources.py::test_a_real_journal_file_through_journalctl",
    "test_kernlog_sources.py::test_since_limits_a_journal_file",
    "test_kernlog_sources.py::test_a_journal_file_that_is_not_one",
    "test_kernlog_sources.py::test_denied_journal_file_and_dmesg_as_an_unprivileged_user",
    "test_kernlog_sources.py::test_permission_denied_says_which_source_and_how_to_get_access",
    "test_kernlog_sources.py::test_real_dmesg_when_allowed",
    # the program in a subprocess or on a pty
    "test_cli.py::test_a_full_disk_is_a_clear_message_not_a_bug_report",
    "test_cli.py::test_bad_option_is_a_usage_error",
    "test_cli.py::test_bare_demo_before_a_subcommand_means_the_tour",
    "test_cli.py::test_demo_list_names_every_scenario",
    "test_cli.py::test_diagnose_takes_the_top_level_interval",
    "test_cli.py::test_headless_commands_do_not_import_textual",
    "test_cli.py::test_help_lists_commands_and_exit_codes",
    "test_cli.py::test_no_gpu_json_still_prints_a_document_and_reason_on_stderr",
    "test_cli.py::test_no_gpu_scenario_exits_3_with_host_part_and_next_step",
    "test_cli.py::test_real_machine_without_driver_exits_3",
    "test_cli.py::test_snapshot_json_schema",
    "test_cli.py::test_unknown_scenario_is_a_usage_error",
    "test_diagnose_command.py::test_bad_options_are_usage_errors",
    "test_diagnose_command.py::test_json_of_an_input_starved_job",
    "test_diagnose_command.py::test_no_driver_exits_3_with_the_diagnosis_the_host_part_and_the_next_step",  # noqa: E501
    "test_diagnose_command.py::test_scheduler_wait_from_the_slurm_queue",
    "test_diagnose_command.py::test_text_names_the_class_the_evidence_and_a_concrete_check",
    "test_exporter.py::test_exporter_serves_at_the_wall_clocks_pace_and_stops_on_sigterm",
    "test_exporter.py::test_exporter_stops_promptly_on_sigterm_and_sigint",
    "test_exporter.py::test_no_driver_is_exit_3_with_the_reason",
    "test_exporter.py::test_usage_errors_and_a_busy_port_are_exit_2",
    "test_fleet.py::test_a_web_servers_error_page_is_one_short_line",
    "test_fleet.py::test_prometheus_down_is_exit_4_with_the_next_step",
    "test_fleet.py::test_prometheus_too_slow_is_exit_4_within_the_timeout",
    "test_kernlog_sources.py::test_a_2_gb_log_is_read_from_its_end_in_bounded_time_and_memory",
    "test_kernlog_sources.py::test_a_log_of_random_bytes",
    "test_kernlog_sources.py::test_stdin",
    "test_kernlog_sources.py::test_under_sanitize_a_named_log_file_is_a_label_not_its_path",
    "test_nvml_cli.py::test_diagnose_with_nvml_down_says_why",
    "test_nvml_cli.py::test_diagnose_without_a_usable_nvml_stops_after_one_reading",
    "test_nvml_cli.py::test_every_gpu_lost_exits_3",
    "test_nvml_cli.py::test_snapshot_fast_takes_one_reading_without_rates",
    "test_nvml_cli.py::test_snapshot_json_on_every_driver",
    "test_nvml_cli.py::test_snapshot_under_a_fault",
    "test_record_replay.py::test_a_recording_stopped_by_a_signal_is_readable",
    "test_record_replay.py::test_a_recording_written_to_stdout_is_a_whole_recording",
    "test_record_replay.py::test_record_and_replay_do_not_import_textual",
    "test_record_replay.py::test_replay_and_demo_together_is_a_usage_error",
    "test_record_replay.py::test_replayed_diagnosis_is_the_live_diagnosis",
    "test_record_replay.py::test_the_live_view_refuses_a_bad_file_before_it_starts",
    "test_report.py::test_the_report_command_does_not_import_textual",
    "test_tui_collect.py::test_a_suspended_view_whose_terminal_hangs_up_ends",
    "test_tui_collect.py::test_a_terminal_that_goes_away_without_sighup_ends_the_program",
    "test_tui_collect.py::test_a_terminal_that_hangs_up_ends_the_program",
    "test_tui_collect.py::test_quit_does_not_wait_for_a_hung_nvml_call",
    "test_tui_collect.py::test_quit_does_not_wait_for_a_terminal_that_does_not_read",
    "test_tui_collect.py::test_sighup_then_sigcont_ends_the_program",
    "test_tui_fleet.py::test_a_window_of_under_two_scrapes_is_a_usage_error",
    "test_tui_fleet.py::test_fleet_sanitize_leaves_no_name_address_or_url",
    "test_tui_fleet.py::test_prometheus_with_demo_or_replay_is_a_usage_error",
    "test_tui_fleet.py::test_without_a_terminal_the_fleet_is_printed_once",
    "test_tui_keys.py::test_bad_filters_on_the_command_line_are_usage_errors",
    "test_tui_keys.py::test_ctrl_z_suspends_and_the_view_comes_back_whole",
    "test_tui_keys.py::test_filters_and_the_save_directory_from_the_command_line",
    "test_tui_keys.py::test_without_a_terminal_it_prints_one_snapshot_and_exits",
    "test_tui_keys.py::test_without_a_terminal_sanitize_prints_the_sanitized_snapshot",
    "test_watch.py::test_a_command_not_found_leaves_no_empty_log",
    "test_watch.py::test_a_recorded_watch_replays_to_the_same_job_alerts",
    "test_watch.py::test_an_existing_output_file_is_added_to_and_only_the_new_lines_read",
    "test_watch.py::test_command_killed_by_a_signal_is_said_so",
    "test_watch.py::test_exit_code_of_a_plain_command",
    "test_watch.py::test_log_file_and_step_regex",
    "test_watch.py::test_one_line_is_one_line",
    "test_watch.py::test_sanitize_leaves_no_paths_or_output_text",
    "test_watch.py::test_started_command_survives_sighup_of_the_watcher",
    "test_watch.py::test_started_command_tree_steps_output_and_exit_code",
    "test_watch.py::test_step_split_estimate_under_the_simulator",
    "test_watch.py::test_usage_errors_are_messages",
    "test_watch.py::test_watch_pid_ends_when_the_process_ends",
    "test_watch.py::test_watch_pid_reads_the_tree_and_leaves_the_process_running",
    "test_watch.py::test_watching_goes_on_until_the_last_worker_ends",
    "test_watch.py::test_workers_that_outlive_the_main_process_are_watched_not_called_ended",
]

SLOW: list[str] = []

E2E_FIXTURES = {"cli", "slurm", "journal_file", "tls_prometheus"}
SLOW_FIXTURES = {"heldout"}  # the 600 held-out cases, read or generated, then judged


def _index(entries: list[str]) -> tuple[set[str], set[str]]:
    files = {e for e in entries if "::" not in e}
    return files, set(entries) - files


_MARKS = {
    "e2e": (_index(E2E), E2E_FIXTURES),
    "slow": (_index(SLOW), SLOW_FIXTURES),
}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    used: dict[str, set[str]] = {name: set() for name in _MARKS}
    collected_files = set()
    for item in items:
        file = item.path.name
        collected_files.add(file)
        base = f"{file}::{getattr(item, 'originalname', item.name)}"
        full = f"{file}::{item.name}"
        fixtures = set(getattr(item, "fixturenames", ()))
        for name, ((files, tests), by_fixture) in _MARKS.items():
            hit = [k for k in (file, base, full) if k in files or k in tests]
            if hit or fixtures & by_fixture:
                item.add_marker(name)
                used[name].update(hit)
    # a stale entry (a renamed or removed test) is said, when whole files were collected
    if config.option.keyword or any("::" in str(a) for a in config.args):
        return
    for name, ((files, tests), _) in _MARKS.items():
        for entry in sorted((files | tests) - used[name]):
            if entry.split("::")[0] in collected_files:
                warnings.warn(
                    f"tests/conftest.py: {name} entry {entry!r} matches no test",
                    pytest.PytestWarning,
                    stacklevel=1,
                )


def run_cli(
    *args: str, env: dict | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    """Run `python -m gputop_diag ARGS` as a user would, in a subprocess."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "gputop_diag", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        check=False,
    )


@pytest.fixture
def cli():
    return run_cli
