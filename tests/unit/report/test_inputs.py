"""gpustack.report.inputs: every command-line value parsed, every bad one refused naming the option."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from gpustack.errors import UsageError
from gpustack.report import inputs

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=timezone.utc).timestamp()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30d", 30 * 86400), ("12h", 43200), ("2w", 14 * 86400), ("1d12h", 129600), ("90m", 5400), (" 7d ", 604800)],
)
def test_durations(text: str, seconds: int) -> None:
    assert inputs.parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("30 days", "--since '30 days': not a duration"),
        ("30", "not a duration"),
        ("", "not a duration"),
        ("-1d", "not a duration"),
        ("1.5d", "not a duration"),
        ("30D", "not a duration"),
        ("59m", "between 1h and 730d"),
        ("1000d", "between 1h and 730d"),
    ],
)
def test_bad_durations_name_the_option(text: str, needle: str) -> None:
    with pytest.raises(UsageError, match=None) as err:
        inputs.parse_duration(text)
    assert needle in err.value.message and err.value.exit_code == 2


def test_format_duration() -> None:
    assert [inputs.format_duration(s) for s in (2592000, 5400, 60, 86400 + 61, 0)] == [
        "30d",
        "1h30m",
        "1m",
        "1d1m1s",
        "0s",
    ]


def test_until() -> None:
    assert inputs.parse_until(None, NOW) == NOW
    assert inputs.parse_until("now", NOW) == NOW
    assert inputs.iso(inputs.parse_until("2026-11-01", NOW)) == "2026-11-01T00:00:00Z"
    assert inputs.iso(inputs.parse_until("2026-11-01T08:30:00Z", NOW)) == "2026-11-01T08:30:00Z"
    assert inputs.iso(inputs.parse_until("2026-11-01T09:30:00+01:00", NOW)) == "2026-11-01T08:30:00Z"
    assert inputs.iso(inputs.parse_until("2026-11-01 08:30", NOW)) == "2026-11-01T08:30:00Z"
    for bad, needle in (("yesterday", "not a date or time"), ("2026-13-01", "not a date"), ("2027-01-01", "future")):
        with pytest.raises(UsageError) as err:
            inputs.parse_until(bad, NOW)
        assert err.value.message.startswith(f"--until {bad!r}") and needle in err.value.message


def test_prices_default_per_model_and_repeated() -> None:
    assert inputs.parse_prices(None) == inputs.Prices()
    assert not inputs.Prices().given
    flat = inputs.parse_prices(["2.5"])
    assert flat.default == 2.5 and flat.for_model("NVIDIA H100 80GB HBM3") == 2.5
    mixed = inputs.parse_prices(["H100=3.20, A100=1.8", "$1"])
    assert mixed.by_model == {"H100": 3.2, "A100": 1.8} and mixed.default == 1.0
    assert mixed.for_model("NVIDIA H100 80GB HBM3") == 3.2  # substring, any case
    assert mixed.for_model("nvidia a100-sxm4-80gb") == 1.8
    assert mixed.for_model("NVIDIA L40S") == 1.0 and mixed.key_for("NVIDIA L40S") == "*"
    assert inputs.parse_prices(["H100=3"]).for_model("NVIDIA L40S") is None


def test_the_longest_or_exact_model_entry_wins() -> None:
    prices = inputs.parse_prices(["A100=1,A100-SXM4-80GB=2,NVIDIA A100-PCIE-40GB=3"])
    assert prices.for_model("NVIDIA A100-SXM4-80GB") == 2
    assert prices.for_model("NVIDIA A100-PCIE-40GB") == 3
    assert prices.for_model("NVIDIA A100 80GB PCIe") == 1
    model = "weird=name"
    assert inputs.parse_prices([f"{model}=4"]).by_model == {model: 4.0}  # the last '=' splits


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        (["abc"], "--price 'abc': 'abc' is not a price"),
        (["H100=abc"], "--price 'H100=abc': 'abc' is not a price"),
        (["=3"], "no GPU model before '='"),
        (["H100=-1"], "0 or more"),
        (["nan"], "finite"),
        (["inf"], "finite"),
        (["2,3"], "two prices for every model (2 and 3)"),
        (["2", "3"], "two prices for every model"),
        (["H100=1,h100=2"], "h100 is priced twice"),
        (["H100=1,"], "an empty entry"),
    ],
)
def test_bad_prices(values: list[str], needle: str) -> None:
    with pytest.raises(UsageError) as err:
        inputs.parse_prices(values)
    assert needle in err.value.message and err.value.message.startswith("--price ")


def test_by_output_and_team_label() -> None:
    assert inputs.parse_by("Team") == "team" and inputs.parse_output("CSV") == "csv"
    for fn, option in ((inputs.parse_by, "--by"), (inputs.parse_output, "--output")):
        with pytest.raises(UsageError) as err:
            fn("pod")
        assert err.value.message.startswith(f"{option} 'pod': choose one of")
    assert inputs.parse_team_label("example.com/team") == "example.com/team"
    for bad in ("team name", "-team", "a/b/c", "Example.com/team", "x" * 64):
        with pytest.raises(UsageError):
            inputs.parse_team_label(bad)


def test_kube_state_metrics_label_names() -> None:
    assert inputs.ksm_label_name("team") == "label_team"
    assert inputs.ksm_label_name("example.com/team") == "label_example_com_team"
    assert inputs.ksm_label_name("teamName") == "label_team_name"
    assert inputs.ksm_label_name("app.kubernetes.io/part-of") == "label_app_kubernetes_io_part_of"
