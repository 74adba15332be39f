"""bench/compare_servers.py's summary: the medians of each run's own figures."""

import importlib.util
import pathlib

_PATH = pathlib.Path(__file__).resolve().parents[2] / "bench" / "compare_servers.py"
_SPEC = importlib.util.spec_from_file_location("compare_servers", _PATH)
compare_servers = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(compare_servers)


def _report(steps_per_s, p50, compute_p50, echo_p50=100.0):
    return {"modes": {
        "entrokv": {"steps_per_s": steps_per_s,
                    "latency_us": {"p50": p50},
                    "server_compute_us": {"p50": compute_p50,
                                          "mean": compute_p50 + 1.0},
                    "server_cpu_us_per_step": compute_p50 + 5.0,
                    "context_switches_per_step": 0.1,
                    "loadgen_cpu_us_per_step": 7.5},
        "echo": {"latency_us": {"p50": echo_p50},
                 "server_cpu_us_per_step": 2.0,
                 "context_switches_per_step": 0.05}}}


def _summary(case, reports):
    """The summary's fields for `case`, one run per report."""
    rows = []
    for report in reports:
        row = compare_servers.row_of(report)
        row.update(server="s", case=case)
        rows.append(row)
    header, line = compare_servers.summary(rows, [case], ["s"])
    return dict(zip(header.split(), line.split()))


def test_cores_busy_is_the_median_of_each_runs_product():
    # Per run, steps/s x compute p50: 10000 x 100 us = 1.0, 20000 x 80 us =
    # 1.6, 30000 x 20 us = 0.6; their median is 1.0. The product of the
    # medians (20000 x 80 us) would be 1.6.
    fields = _summary("b64", [_report(sps, 3000.0, compute) for sps, compute
                              in ((10000, 100.0), (20000, 80.0),
                                  (30000, 20.0))])
    assert fields["cores_busy"] == "1.00"
    assert fields["steps/s"] == "20000"
    assert fields["compute_p50_us"] == "80.0"
    assert fields["loadgen_cpu_us"] == "7.5"


def test_overhead_is_the_median_of_each_runs_ratio():
    # (p50 - compute) / echo per run: (300 - 100) / 100 = 2.0,
    # (500 - 80) / 400 = 1.05, (400 - 20) / 200 = 1.9; median 1.9. From the
    # columns' medians it would be (400 - 80) / 200 = 1.6.
    fields = _summary("1s", [_report(1000, p50, compute, echo)
                             for p50, compute, echo in
                             ((300.0, 100.0, 100.0), (500.0, 80.0, 400.0),
                              (400.0, 20.0, 200.0))])
    assert fields["overhead"] == "1.90"
    assert fields["outside_compute_us"] == "4.0"


def test_one_plain_loadgen_names_rows_by_server_alone():
    assert compare_servers.load_generators(["/x/entrokv-loadgen"]) == [
        ("", "/x/entrokv-loadgen")]
    assert compare_servers.label("now", "") == "now"


def test_named_loadgens_name_rows_by_server_and_loadgen():
    assert compare_servers.load_generators(["old=/a", "new=/b"]) == [
        ("old", "/a"), ("new", "/b")]
    assert compare_servers.label("now", "old") == "now+old"


def test_several_loadgens_must_each_be_named():
    for specs in (["/a", "new=/b"], ["old=/a", "=/b"], ["old="]):
        try:
            compare_servers.load_generators(specs)
        except ValueError as error:
            assert "NAME=PATH" in str(error)
        else:
            raise AssertionError(f"{specs} was accepted")

