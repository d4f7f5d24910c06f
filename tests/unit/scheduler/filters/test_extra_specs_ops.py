"""Nova's extra-spec operators, as flavor extra specs and aggregate metadata use them."""

from __future__ import annotations

import pytest

from scheduler.filters.extra_specs_ops import match, requirement_problem


@pytest.mark.parametrize(
    ("value", "req", "expected"),
    [
        ("123", "= 123", True),
        ("124", "= 123", True),
        ("122", "= 123", False),
        ("12.5", "= 12", True),
        ("123", "== 123", True),
        ("123.0", "== 123", True),
        ("124", "== 123", False),
        ("124", "!= 123", True),
        ("123", "!= 123", False),
        ("124", ">= 123", True),
        ("123", ">= 123", True),
        ("122", ">= 123", False),
        ("122", "<= 123", True),
        ("124", "<= 123", False),
    ],
)
def test_numeric_operators_compare_as_numbers(value: str, req: str, expected: bool) -> None:
    assert match(value, req) is expected


def test_a_bare_equals_sign_means_at_least_as_in_nova() -> None:
    assert match("16", "= 8") is True
    assert match("4", "= 8") is False


def test_numeric_operators_compare_numbers_not_strings() -> None:
    assert match("10", ">= 9") is True
    assert match("10", "s>= 9") is False


def test_a_numeric_operator_on_a_non_number_does_not_match() -> None:
    assert match("fast", ">= 4") is False
    assert match("4", ">= many") is False


@pytest.mark.parametrize(
    ("value", "req", "expected"),
    [
        ("kvm", "s== kvm", True),
        ("qemu", "s== kvm", False),
        ("qemu", "s!= kvm", True),
        ("kvm", "s!= kvm", False),
        ("abc", "s< abd", True),
        ("abd", "s< abc", False),
        ("abc", "s<= abc", True),
        ("abd", "s<= abc", False),
        ("abd", "s> abc", True),
        ("abc", "s> abd", False),
        ("abc", "s>= abc", True),
        ("abb", "s>= abc", False),
    ],
)
def test_string_operators_compare_as_strings(value: str, req: str, expected: bool) -> None:
    assert match(value, req) is expected


def test_in_looks_for_a_substring_of_the_value() -> None:
    assert match("aes mmx avx2", "<in> avx") is True
    assert match("aes mmx", "<in> avx") is False


def test_in_uses_only_the_first_word_after_the_operator() -> None:
    assert match("aes", "<in> aes avx") is True


def test_all_in_needs_every_word_in_the_value() -> None:
    assert match("aes mmx avx2", "<all-in> aes avx2") is True
    assert match("aes mmx", "<all-in> aes avx2") is False


def test_or_matches_any_of_the_alternatives() -> None:
    assert match("kvm", "<or> qemu <or> kvm") is True
    assert match("xen", "<or> qemu <or> kvm <or> xen") is True
    assert match("lxc", "<or> qemu <or> kvm") is False


def test_or_compares_whole_words_not_substrings() -> None:
    assert match("kv", "<or> qemu <or> kvm") is False


def test_or_ignores_a_word_standing_where_the_next_or_keyword_belongs() -> None:
    assert match("b", "<or> a b") is False


def test_no_operator_means_exact_string_equality_of_the_whole_requirement() -> None:
    assert match("true", "true") is True
    assert match("True", "true") is False
    assert match("a b", "a b") is True


def test_an_unknown_operator_is_read_as_part_of_a_plain_string() -> None:
    assert match("<foo> 1", "<foo> 1") is True
    assert match("1", "<foo> 1") is False
    assert match("3", "=> 2") is False


def test_an_operator_without_an_operand_never_matches() -> None:
    for op in ("=", "==", ">=", "s==", "<in>", "<all-in>", "<or>"):
        assert match("x", op) is False, op


def test_a_missing_value_matches_only_a_plain_requirement() -> None:
    assert match(None, ">= 1") is False
    assert match(None, "<or> a <or> b") is False
    assert match(None, "kvm") is False


def test_an_empty_requirement_matches_only_an_empty_value() -> None:
    assert match("", "") is True
    assert match("x", "") is False


@pytest.mark.parametrize(
    "req",
    [
        "4",
        "kvm",
        "= 4",
        ">= 2.5",
        "<= 8",
        "== 1",
        "!= 0",
        "s== kvm",
        "s!= xen",
        "s< b",
        "s<= b",
        "s> a",
        "s>= a",
        "<in> avx2",
        "<all-in> avx avx2",
        "<or> kvm <or> qemu",
        "dedicated",
        "True",
        "",
    ],
)
def test_a_requirement_the_filters_can_evaluate_is_accepted(req: str) -> None:
    assert requirement_problem(req) is None


@pytest.mark.parametrize(
    "req",
    [">=", "=> 4", "< 4", "> 4", "<in>", "<all-in>", "s==", "= many", "<or> a b", "<not-in> x"],
)
def test_a_requirement_the_filters_cannot_evaluate_is_refused(req: str) -> None:
    assert requirement_problem(req) is not None
