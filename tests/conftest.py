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
The CPU of each test, file and fixture (children included), sorted, from tests/cpu_plugin.py:
`python -m pytest -q -n auto --dist loadgroup -p tests.cpu_plugin`.
"""

import gc
import http.server
import os
import subprocess
import sys
import threading
import warnings

import pytest

# The program as a user starts it reads compiled bytecode: so do the suite's workers and the
# programs its tests start (the test command installs with --no-compile, so each module is
# compiled once, when first imported, and read compiled from then on). An environment with
# PYTHONDONTWRITEBYTECODE set would make each of them compile every module from source again
# (about a tenth of the suite's CPU); set here, before the workers start, it reaches all of
# them.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
# The fleet's nodes judged in this process: a worker process costs a fresh interpreter (about
# 0.3 s) per fleet read, and the suite reads small fleets hundreds of times. The worker
# processes themselves are tested in tests/test_fleet_workers.py.
os.environ.setdefault("GPUTOP_DIAG_FLEET_WORKERS", "1")

E2E = [
    "test_ranks_watch.py",  # watch --probe on three- and four-rank jobs (torchrun), 15 to 20 s each
    # real services
    "test_fleet_prometheus.py",  # a real Prometheus (and node-exporter) scraping the exporter
    "test_fleet_tls.py",  # Prometheus behind TLS, openssl
    "test_fleet_triage.py",  # a real Prometheus over a TSDB imported with promtool (~1 s)
    "test_fleet_workers.py",  # the same, read by worker processes (a fresh interpreter each)
    "test_fleet_ranks.py::test_fleet_names_the_straggler_rank_and_its_node_across_two_exporters",  # noqa: E501
    "test_fleet_ranks.py::test_promtool_accepts_the_rank_series",
    "test_fleet_rules.py::test_the_shipped_rules_pass_promtool_check_and_test",
    "test_slurm_real.py",  # a real single-node Slurm
    "test_owner_kernel.py",  # real cgroups and PID namespaces (unshare), as root
    "test_exporter.py::test_promtool_accepts_the_exposition",
    "test_exporter.py::test_dcgm_labels_are_what_promtool_lints_and_why_they_are_optional",
    "test_kernlog_sources.py::test_a_real_journal_file_through_journalctl",
    "test_kernlog_sources.py::test_since_limits_a_journal_file",
    "test_kernlog_sources.py::test_a_journal_file_that_is_not_one",
    "test_kernlog_sources.py::test_denied_journal_file_and_dmesg_as_an_unprivileged_user",
    "test_kernlog_sources.py::test_permission_denied_says_which_source_and_how_to_get_access",
    "test_kernlog_sources.py::test_real_dmesg_when_allowed",
    # the program in a subprocess or on a pty
    "test_ascii_output.py::test_every_command_prints_on_an_ascii_only_output",
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
    "test_nvml_cli.py::test_snapshot_takes_one_reading_and_rates_takes_two",
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
    "test_tui_terminal.py::test_the_program_writes_ascii_only_under_lang_c",
    "test_tui_terminal.py::test_the_program_writes_no_colour_under_no_color",
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

SLOW = [
    "test_ranks_jobs.py",  # four-rank gloo jobs forked from one torch import, 2.5 to 7 s each
    "test_sanitize_nccl.py::test_every_generated_nccl_prefix_is_pseudonymised",  # 600 lines
    "test_sanitize_own_words.py::test_sanitized_health_keeps_every_title_and_next_step",
    "test_sanitize_own_words.py::test_a_sanitized_replay_keeps_the_advice_in_every_section",
    "test_tui_process_table.py::test_owner_takes_the_user_columns_place_at_80x24",
    "test_tui_process_table.py::test_owner_beside_user_and_the_namespaces_pid_where_the_pane_is_wide",
    "test_tui_process_table.py::test_compute_bound_at_200_columns_without_the_panel_names_users_and_owners",  # noqa: E501
    "test_tui_process_table.py::test_job_pod_and_ctr_filters_select_their_rows_and_a_bad_term_says_why",  # noqa: E501
    "test_tui_process_table.py::test_o_reaches_owner_and_the_rows_follow_it",
    "test_tui_process_table.py::test_every_shape_of_table_is_walked",  # 32 scenarios sampled
    "test_tui_terminal.py::test_ascii_only_and_no_colour_on_every_screen_as_it_changes",
    "test_tui_small_terminal.py",  # 80x24 with a resize to 40x12 in between, 1 to 3 s each
    "test_filter_sanitize.py::test_job_pod_and_ctr_typed_as_the_node_names_them_find_their_rows",
    "test_tui_snapshots.py::test_owner_column_and_namespace_pids_200x50_comm_bound",
    "test_owner_surfaces.py::test_the_snapshot_names_each_gpu_processs_job_pod_or_container",
    "test_sanitize_surfaces.py::test_watched_job_view_and_s_during_watch_name_nothing_planted",
    "test_sanitize_surfaces.py::test_replay_of_a_sanitized_recording_names_nothing_planted",
    "test_sanitize_surfaces.py::test_live_view_under_sanitize_names_nothing_planted",
    "test_sanitize_surfaces.py::test_watch_by_pid_and_by_slurm_job_names_nothing_planted",
    "test_probe_jobs.py",  # real training jobs under the probe: torch starts in each
    "test_probe_torch.py::test_sync_sites_are_the_users_lines_and_torch_reading_its_cpu_counters_is_not_one",  # noqa: E501
    "test_probe_torch.py::test_torch_compile_runs_as_it_does_without_the_probe",
    "test_probe_torch.py::test_kv_cache_bytes_of_a_transformers_cache",
    "test_probe_sample.py::test_a_sampled_step_of_a_real_loop_sees_its_batch_shapes_precision_and_loss",  # noqa: E501
    "test_planner_models.py::test_parameter_count_is_exact_for_every_family",
    "test_sanitize_planted.py::test_no_planted_identifier_survives_any_headless_command",
    "test_sanitize_planted.py::test_a_sanitized_report_keeps_what_it_is_about",
    "test_sanitize_planted.py::test_an_account_named_nvidia_and_short_job_ids_leave_the_report_whole",  # noqa: E501
    "test_classify_measured.py::test_measured_sync_time_and_its_call_sites_decide_over_input_pressure",  # noqa: E501
    "test_probe_integration.py::test_the_job_pane_draws_the_measured_split_once_steps_arrive",
    "test_probe_integration.py::test_the_measured_split_in_ascii_and_under_sanitize",
    "test_probe_reader.py::test_probe_states_survive_a_recording_and_a_replay_judges_them_alike",
    "test_collect_nvml.py::test_xid_app_events_arrive_once_each",
    "test_diagnose.py::test_a_change_of_class_is_followed_within_10_s",
    "test_diagnose.py::test_alerts_of_the_scenarios",
    "test_diagnose.py::test_other_simulator_seeds_give_the_same_verdict",
    "test_diagnose.py::test_the_tour_is_followed_phase_by_phase",
    "test_driver_command.py::test_side_panel_alert_and_driver_pane",
    "test_export_sanitize.py::test_diagnose_sanitize_hides_job_ids_and_names[xid-app]",
    "test_exporter.py::test_verdict_input_pressure_and_dataloader_cpu",
    "test_fleet.py::test_the_odd_node_out_of_a_waiting_job_is_the_straggler",
    "test_heldout.py::test_cases_are_sixty_seconds_oldest_first",
    "test_mapping_pane.py::test_mig_rows",
    "test_mapping_pane.py::test_pane_at_120_columns_rows_do_not_look_alike",
    "test_mapping_pane.py::test_pane_under_sanitize_hides_the_layout",
    "test_monitor.py::test_a_feed_that_lags_the_clock_does_not_take_later_kernel_lines_for_new_events",  # noqa: E501
    "test_monitor.py::test_an_xid_nvml_reported_is_not_counted_again_from_the_kernel_log",
    "test_nvml_drivers.py::test_every_driver_delivers_xid_events",
    "test_nvml_faults.py::test_a_monitor_closes_promptly_over_a_hung_call",
    "test_nvml_faults.py::test_close_waits_at_most_a_second_for_a_hung_tick_and_skips_shutdown",
    "test_nvml_faults.py::test_xid_events_attributed_by_bus_id_when_the_handle_is_unknown",
    "test_record_replay.py::test_a_sanitized_recording_holds_none_of_the_machines_identifiers",
    "test_record_replay.py::test_read_of_write_is_the_identity_over_demo_scenarios[xid-79-.jsonl.gz]",  # noqa: E501
    "test_record_replay.py::test_read_of_write_is_the_identity_over_demo_scenarios[xid-79-.jsonl]",
    "test_record_replay.py::test_replay_keys_are_in_the_help_only_while_replaying",
    "test_record_replay.py::test_replay_seconds_takes_the_first_n_seconds_and_text_matches_too",
    "test_record_replay.py::test_the_live_view_plays_a_recording_with_speed_pause_and_step",
    "test_recording_signals.py::test_a_file_cut_anywhere_reads_as_its_whole_lines",
    "test_recording_signals.py::test_a_file_cut_at_any_byte_of_its_last_line_reads_every_earlier_line",  # noqa: E501
    "test_recording_signals.py::test_an_interrupted_write_leaves_a_whole_file_and_the_writer_goes_on",  # noqa: E501
    "test_report.py::test_a_report_of_a_recording",
    "test_report_leaks.py::test_no_identifier_reaches_the_other_sanitized_outputs",
    "test_startup.py::test_snapshot_still_reads_a_recording_and_sanitizes",
    "test_tui.py::test_a_failing_collector_shows_a_banner_and_the_view_keeps_its_figures",
    "test_tui.py::test_a_snapshot_reaches_the_widgets",
    "test_tui.py::test_bracketed_text_in_a_command_line_is_shown_as_text_not_markup",
    "test_tui.py::test_brackets_select_the_gpu_everywhere",
    "test_tui.py::test_capacity_oom_kill_from_the_kernel_log_reaches_the_panel",
    "test_tui.py::test_capital_s_writes_the_snapshot_with_the_xid_history",
    "test_tui.py::test_footer_shows_the_keys_at_80_columns",
    "test_tui.py::test_header_fits_80_columns_with_every_state_shown",
    "test_tui.py::test_help_screen_lists_the_keys_and_q_quits",
    "test_tui.py::test_lost_gpu_mid_run_shows_the_banner_and_the_rest_goes_on",
    "test_tui.py::test_memory_leak_flags_a_growing_gpu",
    "test_tui.py::test_missing_driver_banner_and_the_app_keeps_running",
    "test_tui.py::test_narrow_terminal_puts_a_strip_below_and_p_shows_all_of_it",
    "test_tui.py::test_no_color_keeps_every_state_in_words",
    "test_tui.py::test_number_keys_and_tab_switch_panes",
    "test_tui.py::test_only_the_visible_pane_renders",
    "test_tui.py::test_plus_minus_change_the_interval_and_say_so",
    "test_tui.py::test_s_writes_the_sanitized_report_and_shows_its_path",
    "test_tui.py::test_sanitize_covers_ticks_from_a_feed_without_the_sanitizer",
    "test_tui.py::test_sanitize_hides_identifiers_on_every_pane_and_in_the_saved_files",
    "test_tui.py::test_steady_memory_is_not_flagged",
    "test_tui.py::test_table_rows_are_updated_in_place_never_cleared",
    "test_tui.py::test_the_job_pane_and_key_appear_once_a_job_is_set",
    "test_tui.py::test_the_report_falls_back_when_the_save_dir_cannot_be_written",
    "test_tui.py::test_wide_terminal_p_hides_and_shows_the_panel",
    "test_tui_changes.py::test_a_gpu_lost_mid_run_shows_lost_on_its_row",
    "test_tui_changes.py::test_a_job_starting_is_not_growth",
    "test_tui_changes.py::test_driver_facts_that_change_while_the_pane_is_hidden_show_when_shown",
    "test_tui_changes.py::test_every_pane_follows_a_resize_in_between",
    "test_tui_changes.py::test_memory_growth_appears_whole_after_the_first_frame",
    "test_tui_changes.py::test_no_verdict_yet_says_how_long_until_one",
    "test_tui_changes.py::test_p_twice_keeps_every_word_whole",
    "test_tui_changes.py::test_the_panel_figures_are_never_dated_while_ticks_come_every_second",
    "test_tui_changes.py::test_the_tab_strip_names_the_pane_shown",
    "test_tui_changes.py::test_utilization_figures_follow_a_drop_at_once",
    "test_tui_changes.py::test_xid_events_arriving_while_the_pane_is_hidden_show_when_it_is_shown",
    "test_tui_collect.py::test_a_new_interval_reaches_the_sampler",
    "test_tui_collect.py::test_a_tick_stuck_in_the_driver_is_said_on_the_banner",
    "test_tui_collect.py::test_collectors_run_in_a_thread_and_stop_promptly_on_quit",
    "test_tui_collect.py::test_low_bandwidth_uses_plain_glyphs_and_slower_history_repaints",
    "test_tui_collect.py::test_messages_that_arrive_while_the_view_closes_are_dropped",
    "test_tui_collect.py::test_r_samples_now_without_waiting_for_the_interval",
    "test_tui_collect.py::test_space_pauses_sampling_r_samples_once_space_resumes",
    "test_tui_fleet.py::test_a_node_offers_only_what_prometheus_describes",
    "test_tui_fleet.py::test_a_node_that_stopped_reporting_says_how_old_its_last_scrape_is",
    "test_tui_fleet.py::test_a_node_told_apart_by_instance_shows_its_rows_pseudonym",
    "test_tui_fleet.py::test_fleet_pane_lists_the_nodes_sorts_and_opens_one",
    "test_tui_fleet.py::test_node_panes_are_fed_from_prometheus_and_judge_the_node",
    "test_tui_fleet.py::test_rows_sort_by_alerts_class_and_node",
    "test_tui_fleet.py::test_sanitized_node_panes_name_no_host_address_or_key",
    "test_tui_fleet.py::test_series_younger_than_the_window_keep_their_scrape_interval",
    "test_tui_keys.py::test_filter_by_user_gpu_and_pid_from_the_prompt_and_esc_clears",
    "test_tui_keys.py::test_g_shows_only_the_selected_gpu_and_its_processes",
    "test_tui_keys.py::test_h_f1_and_question_mark_open_help_and_esc_closes_it",
    "test_tui_keys.py::test_help_wraps_to_the_width_and_lists_every_habit",
    "test_tui_keys.py::test_low_bandwidth_draws_ascii_only",
    "test_tui_keys.py::test_q_f10_and_ctrl_c_quit",
    "test_tui_keys.py::test_sort_keys_and_the_selected_gpu_first",
    "test_tui_keys.py::test_the_command_shows_the_script_not_the_interpreters_path",
    "test_tui_keys.py::test_the_footer_does_not_promise_the_job_pane",
    "test_tui_snapshots.py::test_gpu_lost_mid_run_memory_and_utilization_120x40",
    "test_tui_snapshots.py::test_low_bandwidth_utilization_80x24",
    "test_tui_snapshots.py::test_memory_growth_80x24_after_a_minute",
    "test_tui_snapshots.py::test_memory_pane_80x24_input_starved",
    "test_tui_snapshots.py::test_pane_compute_bound",
    "test_tui_snapshots.py::test_panel_hidden_and_shown_again_120x40",
    "test_tui_snapshots.py::test_resized_wide_and_back_80x24",
    "test_tui_snapshots.py::test_utilization_pane_80x24_input_starved",
    "test_tui_snapshots.py::test_whole_panel_80x24_after_gpu_lost",
    "test_tui_snapshots.py::test_wide_200x50_filtered_and_sorted",
    "test_tui_snapshots.py::test_xid_events_that_arrived_while_hidden_120x40",
    "test_tui_snapshots.py::test_xid_pane_after_gpu_lost",
    "test_watch_tui.py::test_quit_after_the_job_ended_does_not_ask",
    "test_watch_tui.py::test_quit_asks_and_d_leaves_the_job_running",
    "test_watch_tui.py::test_quit_y_stops_a_job_that_ignores_sigterm_without_freezing_the_view",
    "test_watch_tui.py::test_quit_y_stops_the_job_and_returns_its_code",
    "test_watch_tui.py::test_watch_mode_opens_on_the_job_pane",
    "test_xid_cli.py::test_replay_joins_the_recorded_history",
    "test_xid_pane.py::test_a_replay_says_the_log_before_it_is_not_read",
    "test_xid_pane.py::test_sanitize_hides_kernel_text_and_process_names",
    "test_xid_pane.py::test_the_log_before_the_run_shows_once_read_without_another_tick",
    "test_xid_pane.py::test_the_pane_shows_the_log_before_the_run_and_the_triage",
    "test_exit_statuses.py::test_each_listed_status_is_reached[live-view-4]",
    "test_tui_saving.py::test_a_long_save_path_breaks_at_a_slash_and_never_inside_the_file_name",
]

E2E_FIXTURES = {"cli", "slurm", "journal_file", "tls_prometheus"}
SLOW_FIXTURES = {"heldout"}  # the 600 held-out cases, read or generated, then judged
# Module fixtures whose tests share one worker under `--dist loadgroup` (the README's command):
# the held-out cases (too costly to build on every worker), and the one real Slurm cluster (each
# worker's fixture cancels the test jobs it finds, the other workers' included).
# A module fixture that starts services (Prometheus and exporters: ~25 s; Prometheus behind
# TLS: ~11 s) is built once per worker that runs one of its tests: its tests share one worker.
XDIST_GROUPS = {
    "heldout": "heldout",
    "slurm": "slurm",
    "fleet": "fleet",
    "fleet_doc": "fleet",
    "tls_prometheus": "tls",
    # tests/test_tui_fleet.py's stand-in (three nodes sampled for 40 s: ~2 s of CPU a build) and
    # tests/test_fleet_workers.py's Prometheus over an imported TSDB
    "prometheus": "prometheus",
}


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: -n auto
def pytest_xdist_auto_num_workers(config):
    """`-n auto` is one worker more than the CPUs this process may use (xdist's default is the
    physical cores). About a fifth of the suite's time is waiting (on a subprocess, a pty, a
    timer), not computing; with two workers on 2 cores a core sat idle for 95 s of a 4 m 45 s
    run, with three the whole run took 4 m 10 s to 4 m 30 s. PYTEST_XDIST_AUTO_NUM_WORKERS, and
    `-n logical`, still decide where given."""
    if config.option.numprocesses != "auto" or os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return cpus + 1


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
        for fixture in sorted(fixtures & XDIST_GROUPS.keys()):
            item.add_marker(pytest.mark.xdist_group(XDIST_GROUPS[fixture]))
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


class _Canned(http.server.BaseHTTPRequestHandler):
    """Answers each POST with `server.answer(path)`: (status, content type, body)."""

    def do_POST(self):  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        status, content_type, body = self.server.answer(self.path)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def canned_http():
    """A local HTTP server whose answers the test gives: set `server.answer` to a function of
    the request's path returning (status, content type, body). `server.url` is its address."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Canned)
    srv.url = f"http://127.0.0.1:{srv.server_port}"
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def pytest_configure(config):
    """SIGINT and SIGQUIT as a terminal's foreground job has them. Started in the background
    by a script (`pytest ... &` without job control), the suite inherits them ignored (the
    shell's doing for background jobs,
    https://pubs.opengroup.org/onlinepubs/9799919799/utilities/V3_chap02.html#tag_19_12), and
    the program keeps an ignored signal ignored as shells' jobs do (`monitor/run.py`): the
    tests that send them, to this process or to the program they start (which inherits them),
    would fail on a sound program. A background job gets no Ctrl-C from a terminal, so nothing
    is lost. SIGHUP is left as it came: under `nohup` it stays ignored, so that the run
    survives the session's end (the tests of what a hang-up does then fail: run the suite in
    tmux or with `setsid` instead of `nohup`)."""
    import signal

    defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGQUIT: signal.SIG_DFL}
    for sig, handler in defaults.items():
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, handler)


def pytest_collection_finish(session):
    """Once the tests are collected (in each worker), the objects alive then (modules, test
    items, fixtures' definitions) are moved out of the collector's sight and its youngest
    generation is collected less often: the suite allocates heavily (the live view's widgets,
    snapshots) and spent a tenth to a sixth of its CPU re-scanning long-lived objects (measured:
    tests/test_tui.py with tests/test_tui_process_table.py, 47-53 -> 41-42 CPU-s). Garbage is
    still collected, only less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 50, 100)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """Once the session ends pytest collects garbage five times over before it reports the
    exceptions finalizers raised (`gc_collect_harder`,
    https://github.com/pytest-dev/pytest/blob/8.4.2/src/_pytest/unraisableexception.py): each a
    full pass over the worker's heap, which Textual's caches of rendered lines (bounded, alive
    to the end) make ~0.5 s long (measured: 2.4 of a worker's CPU-s after
    tests/test_tui_changes.py alone). Collected here until a pass finds nothing (a pass that
    finds nothing runs no finalizer: the passes after it could find nothing either), what is
    left, all alive, is moved out of the collector's sight: pytest's five passes then look at
    what is made after this only, and report the same exceptions."""
    for _ in range(5):
        if not gc.collect():
            break
    gc.freeze()
