"""Size and bandwidth parsing: GB = 1e9, GiB = 2**30, never mixed."""

import math
import re

import pytest

from codesign import units


@pytest.mark.parametrize("text, expected", [
    ("8B", 8.0), ("8", 8.0), ("64KiB", 65536.0), ("1GiB", 2.0**30), ("1GB", 1e9),
    ("1.5MiB", 1.5 * 2**20), ("2TB", 2e12), ("4k", 4096.0), ("1e3", 1000.0),
    (" 16 MB ", 16e6), ("0", 0.0), (7, 7.0), (2.5, 2.5),
    ("1PiB", 2.0**50), ("1EiB", 2.0**60), ("2PB", 2e15), ("1EB", 1e18), ("1e30", 1e30),
])
def test_parse_bytes(text, expected):
    assert units.parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["abc", "8XB", "GiB", "1..2GB", "-5", "-1GiB", "1 2 B"])
def test_parse_bytes_rejects_and_names_the_value(text):
    with pytest.raises(ValueError, match=re.escape(f"bytes={text!r}")):
        units.parse_bytes(text, name="bytes")


def test_parse_bytes_rejects_negative_numbers():
    with pytest.raises(ValueError, match="non-negative"):
        units.parse_bytes(-3.0)


@pytest.mark.parametrize("text, expected", [
    ("50GB/s", 50e9), ("400Gb/s", 50e9), ("400Gbps", 50e9), ("1TB/s", 1e12),
    ("100MB/s", 1e8), (1e9, 1e9), ("1PB/s", 1e15), ("8Eb/s", 1e18),
])
def test_parse_bandwidth(text, expected):
    assert units.parse_bandwidth(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("text", ["50GB", "fast", "0GB/s", "-1GB/s"])
def test_parse_bandwidth_rejects(text):
    with pytest.raises(ValueError, match="bandwidth="):
        units.parse_bandwidth(text)


def test_parse_size_range_is_powers_of_two_inclusive():
    assert units.parse_size_range("4KiB:64KiB") == [4096.0, 8192.0, 16384.0, 32768.0, 65536.0]
    assert units.parse_size_range("8B:8B") == [8.0]
    sizes = units.parse_size_range("8B:8GiB")
    assert sizes[0] == 8 and sizes[-1] == 8 * 2**30 and len(sizes) == 31


@pytest.mark.parametrize("text", ["8B", "64KiB:8B", "0:8B", "1:2:3", "x:1GiB"])
def test_parse_size_range_rejects(text):
    with pytest.raises(ValueError, match="sweep="):
        units.parse_size_range(text, name="sweep")


@pytest.mark.parametrize("n, text", [
    (65536, "64KiB"), (8, "8B"), (2**30, "1GiB"), (1.5 * 2**20, "1.5MiB"), (3 * 2**40, "3TiB"),
    (2**50, "1PiB"), (5 * 2**60, "5EiB"),
])
def test_format_bytes(n, text):
    assert units.format_bytes(n) == text


def test_constants_do_not_mix_decimal_and_binary():
    assert units.GB == 1e9 and units.GiB == 2**30
    assert units.Gbps * 400 == 50e9
    assert units.us == 1e-6


def test_format_quantity_by_name():
    assert units.format_quantity("n_bytes", 2.0**30) == "1GiB"
    assert units.format_quantity("busbw_Bps", 4.7e10) == "47 GB/s"
    assert units.format_quantity("time_s", 2.5e-6) == "2.5 us"
    assert units.format_quantity("step_time_s", 11.4) == "11.4 s"
    assert units.format_quantity("mtbf_s", 11_120.0) == "11,120 s (3.089 h)"
    assert units.format_quantity("time_to_train_s", 86_400.0 * 50) == "4,320,000 s (50 d)"
    assert units.format_quantity("mfu", 0.41234) == "0.4123"
    assert units.format_quantity("memory_bytes_per_gpu", 52.49e9) == "52.49 GB"
    assert math.isclose(units.parse_quantity("x_Bps", "400Gb/s", field="f"), 50 * units.GB)


def test_a_negative_size_is_named_as_negative():
    with pytest.raises(ValueError, match=r"bytes='-1KiB' must be a non-negative number of bytes"):
        units.parse_bytes("-1KiB", name="bytes")
    assert units.parse_bytes("+1GB") == 1e9
