"""Number spans and place values: the spec's table, edge cases, and a property test against a slow
obvious reference written here."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from del_core import number_spans
from helpers.toy_vocab import DIGITS, OTHER, POINT, VOCAB, encode


def reference_place_values(row):
    """Slow, obvious reference of DEL_SPEC.md section 2 for one sequence of ids."""
    u = [0.0] * len(row)
    k_out = [0] * len(row)
    i = 0
    while i < len(row):
        if row[i] not in DIGITS and row[i] != POINT:
            i += 1
            continue
        end = i
        while end < len(row) and (row[end] in DIGITS or row[end] == POINT):
            end += 1
        span = row[i:end]
        p = span.index(POINT) if POINT in span else len(span)
        n_frac_digits = sum(1 for t in span[p + 1 :] if t in DIGITS)
        seen_frac = 0
        for j, tok in enumerate(span):
            if tok == POINT:
                continue
            if j < p:
                u[i + j] = 2.0 * (p - j)
                k_out[i + j] = p - j
            else:
                u[i + j] = 1.02 ** -(j - p + 1)
                k_out[i + j] = n_frac_digits - seen_frac
                seen_frac += 1
        i = end
    return u, k_out


def place_values(text):
    spans = number_spans(torch.tensor([encode(text)]), VOCAB)
    return spans.place_value[0].tolist()


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1234", [8, 6, 4, 2]),
        ("3.14", [2, 0, 0.9612, 0.9423]),
        ("100.125", [6, 4, 2, 0, 0.9612, 0.9423, 0.9238]),
    ],
)
def test_spec_examples(text, expected):
    assert place_values(text) == pytest.approx(expected, abs=5e-5)


def test_spec_examples_exact_powers():
    assert place_values("100.125")[4:] == pytest.approx([1.02**-2, 1.02**-3, 1.02**-4], rel=1e-6)


def test_span_starting_with_point_is_fractional():
    # The released code gives this '5' u = 2 (defect b of the spec); the spec says 1.02 ** -2.
    assert place_values("x.5") == pytest.approx([0, 0, 1.02**-2], rel=1e-6)


def test_separators_and_ignored_positions_split_spans():
    assert place_values("1,000") == pytest.approx([2, 0, 6, 4, 2])
    assert place_values("12_34") == pytest.approx([4, 2, 0, 4, 2])


def test_spans_do_not_cross_sequence_boundaries():
    # Row 0 ends inside a number and row 1 starts with one: the released code merges them (defect a).
    labels = torch.tensor([encode("ab12"), encode("34cd")])
    spans = number_spans(labels, VOCAB)
    assert spans.place_value.tolist() == [[0, 0, 4, 2], [4, 2, 0, 0]]
    assert spans.span_start.tolist() == [[False, False, True, False], [True, False, False, False]]


def test_multiple_points_and_lone_point():
    # Only the first point splits integer from fraction; every point has u = 0.
    u = place_values("1.2.3")
    assert u == pytest.approx([2, 0, 1.02**-2, 0, 1.02**-4], rel=1e-6)
    assert place_values("a.b") == [0, 0, 0]


def test_digit_values_and_place_index():
    spans = number_spans(torch.tensor([encode("x305.27")]), VOCAB)
    assert spans.digit_value[0].tolist() == [-1, 3, 0, 5, -1, 2, 7]
    assert spans.place_index[0].tolist() == [0, 3, 2, 1, 0, 2, 1]
    assert spans.is_point[0].tolist() == [False] * 4 + [True, False, False]


def test_any_leading_shape():
    labels = torch.tensor(encode("12.5ab7")).reshape(1, 1, 7).expand(2, 3, 7)
    spans = number_spans(labels, VOCAB)
    assert spans.place_value.shape == (2, 3, 7)
    assert spans.place_value[1, 2].tolist() == pytest.approx([4, 2, 0, 1.02**-2, 0, 0, 2])


ALPHABET = list(DIGITS) + [POINT] * 3 + [OTHER] * 4 + [-100] * 2


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda rows: st.integers(1, 24).flatmap(
            lambda cols: st.lists(
                st.lists(st.sampled_from(ALPHABET), min_size=cols, max_size=cols), min_size=rows, max_size=rows
            )
        )
    )
)
def test_property_matches_slow_reference(rows):
    spans = number_spans(torch.tensor(rows), VOCAB)
    for r, row in enumerate(rows):
        u, k = reference_place_values(row)
        assert spans.place_value[r].tolist() == pytest.approx(u, rel=1e-6)
        assert spans.place_index[r].tolist() == k
        assert spans.is_digit[r].tolist() == [t in DIGITS for t in row]
        assert spans.digit_value[r].tolist() == [DIGITS.index(t) if t in DIGITS else -1 for t in row]
