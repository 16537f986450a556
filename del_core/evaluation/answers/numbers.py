"""Numbers in answers: finding them in text, parsing, comparing with a tolerance, and their digits.

Comparison (:func:`numbers_match`), the rule of this project (the authors' release rounds the
prediction to an integer for integer golds and accepts 4% relative error otherwise):
  * equal values match ("18.0" and "18", "0.50" and "1/2", "18.90" and "18.9");
  * a gold written as an integer or a fraction ("18", "3/4", ``\frac{266664}{5}``) is exact: only
    binary floating-point round-off is forgiven besides (|p - g| <= 1e-9 * max(1, |g|), e.g. a
    program printing 17.999999999999996 for 18);
  * a gold written as a decimal with k fractional digits may be the rounding of a longer value: a
    prediction written as a fraction, or with at least k + 2 fractional digits, matches when it
    rounds to the gold there, |p - g| <= 0.5 * 10**-k ("583.3333333333334" and "583 1/3" for
    "583.3333", "28.0833" for "28.08").
    A gold that is the rounding of a repeating decimal (:func:`repeating_value`: "583.3333" is
    1750/3, "0.6667" is 2/3, "83.33" is 250/3) also accepts that value's rounding to 2 or more
    places ("583.33", "0.67", "83.333"): the files themselves round such values to 2 places.
    Any other prediction written with k + 1 or fewer digits is a different value of about the
    same precision and must be equal: "0.25" is not "0.3", "1.75" is not "1.8", "583.3" is not
    "583.3333", "0.455" is not "0.45". A fixed relative tolerance fails both ways on these files
    (1e-4 accepts 53333.8 for 266664/5 = 53332.8 and rejects 28.0833 for 28.08).
Forms (the contract of docs/number_forms.md): thousands commas ("1,234"), LaTeX and thin-space
separators ("1{,}450{,}000", "1\\,450"), plain-space groups in an answer statement
(:func:`spaced_thousands`), scale words ("1.45 million"), a leading "$", a final "%", simple
fractions ("3/4", ``\\frac{3}{4}``), mixed numbers ("583 1/3") and, in answer statements,
numbers in words (:func:`number_from_words`).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Optional

ROUND_OFF = Fraction(1, 10**9)

# "-1,234.5", "1234", ".5", "3/4"; thousands commas only in groups of three (so "15,9" is a list)
SCALE_WORDS = {"thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}
_SCALE = r"(?:\s+(?:" + "|".join(SCALE_WORDS) + r")\b)?"
NUMBER_PATTERN = re.compile(
    r"(?<![\w.])-?\d+ \d+/\d+(?![\d/.])"  # a mixed number "583 1/3"
    r"|(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?:\s*/\s*\d+(?:\.\d+)?)?(?![\d])"
    + _SCALE
    + r"|(?<![\w.])-?\.\d+"
)
# thousands separators other than ",": LaTeX "{,}", "\,", "\ ", "~"; thin and no-break spaces
_LATEX_THOUSANDS = re.compile(r"(?<=\d)(?:\{,\}|\\,|\\ |~|[\u2009\u202f\u00a0])(?=\d{3}(?!\d))")
# plain spaces: only in an answer statement (:func:`spaced_thousands`), where "118 000" is one number;
# elsewhere "4 6 14 15" and "99 101" are the values a program printed
_SPACED_THOUSANDS = re.compile(r"(?<![\d.,/])(\d{1,3}(?: \d{3})+)(?![\d/]|\.\d| \d| ?/)")
_MIXED = re.compile(r"(-?)(\d+) (\d+)/(\d+)")
_LATEX_FRACTION = re.compile(r"^(-?)\\[dt]?frac\{(-?\d+)\}\{(\d+)\}$")


def find_numbers(text: str) -> list[str]:
    """The numbers written in ``text``, in order, as written (thousands separators as commas)."""
    text = re.sub(r"\\[dt]?frac\{(-?\d+)\}\{(\d+)\}", r"\1/\2", text)
    return [m.group(0) for m in NUMBER_PATTERN.finditer(thousands_with_commas(text.replace("\u2212", "-")))]


def thousands_with_commas(text: str) -> str:
    """``text`` with LaTeX, thin-space and no-break-space thousands separators written as ","
    ("1{,}450{,}000", "1\\,450\\,000" -> "1,450,000")."""
    return _LATEX_THOUSANDS.sub(",", text)


def spaced_thousands(statement: str) -> str:
    """An answer statement with digit groups separated by plain spaces written with commas
    ("118 000", "1 450 000" -> "118,000", "1,450,000"); a statement commits to one value, so the
    groups are one number there (not in a program's output, where "99 101" is two values)."""
    return _SPACED_THOUSANDS.sub(lambda m: m.group(1).replace(" ", ","), statement)


def parse_number(text) -> Optional[Fraction]:
    """An exact value for a number as written ("1,234.50", "$3", "3/4", "\\frac{3}{4}", "1e-05",
    "12%", "583 1/3"), or None."""
    if text is None:
        return None
    value = thousands_with_commas(str(text).strip().replace("\u2212", "-")).rstrip(".").strip()
    value = re.sub(r"^\$\s*|\s*\\?%$|^\\\$\s*", "", value)
    scale = re.fullmatch(r"(.*\d)\s+(" + "|".join(SCALE_WORDS) + ")", value)
    if scale:
        number = parse_number(scale.group(1))
        return None if number is None else number * SCALE_WORDS[scale.group(2)]
    mixed = _MIXED.fullmatch(value)
    if mixed and int(mixed.group(3)) < int(mixed.group(4)):
        sign, whole, num, den = mixed.groups()
        magnitude = int(whole) + Fraction(int(num), int(den))
        return -magnitude if sign else magnitude
    value = value.replace(" ", "")
    latex = _LATEX_FRACTION.match(value)
    if latex:
        sign, num, den = latex.groups()
        value = f"{sign}{num}/{den}"
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", value):
        value = value.replace(",", "")
    try:
        if "/" in value:
            num, den = value.split("/")
            return Fraction(Decimal(num)) / Fraction(Decimal(den))
        number = Decimal(value)
    except (InvalidOperation, ValueError, ZeroDivisionError):
        return None
    return Fraction(number) if number.is_finite() else None


_UNITS = re.findall(
    r"\w+", "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"
) + ["seventeen", "eighteen", "nineteen"]
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
_NUMBER_WORD = re.compile(
    r"\b(?:" + "|".join(_UNITS + list(_TENS) + ["hundred"] + list(SCALE_WORDS)) + r")(?:[\s-]+(?:and\s+)?"
    r"(?:" + "|".join(_UNITS + list(_TENS) + ["hundred"] + list(SCALE_WORDS)) + r"))*\b",
    re.I,
)


def number_from_words(text: str) -> Optional[int]:
    """The first whole number written in words in ``text`` ("eighteen", "twenty-five", "one
    hundred and five", "three thousand"), or None."""
    match = _NUMBER_WORD.search(text)
    if not match:
        return None
    total, current = 0, 0
    for word in re.findall(r"[a-z]+", match.group(0).lower()):
        if word in _UNITS:
            current += _UNITS.index(word)
        elif word in _TENS:
            current += _TENS[word]
        elif word == "hundred":
            current = max(current, 1) * 100
        elif word in SCALE_WORDS:
            total, current = total + max(current, 1) * SCALE_WORDS[word], 0
    return total + current


def decimal_text(value: Fraction) -> str:
    """An exact value as decimal text when it terminates (9/20 -> "0.45", 45 -> "45"), else "p/q"."""
    if value.denominator == 1:
        return str(value.numerator)
    text = f"{float(value):.12f}".rstrip("0")
    return text if parse_number(text) == value else f"{value.numerator}/{value.denominator}"


def fractional_digits(text: str) -> int:
    """How many digits a number is written with after its point ("583.3333" -> 4, "18" -> 0)."""
    match = re.search(r"\.(\d+)\s*$", str(text).strip().rstrip("%"))
    return len(match.group(1)) if match else 0


def numbers_match(prediction, gold) -> bool:
    """The module's comparison rule; either side unparsable -> False."""
    p, g = parse_number(prediction), parse_number(gold)
    if p is None or g is None:
        return False
    if p == g:
        return True
    k = fractional_digits(gold)
    if k == 0:
        return abs(p - g) <= ROUND_OFF * max(1, abs(g))
    exact_fraction = "/" in str(prediction) or "frac" in str(prediction)
    if not exact_fraction and fractional_digits(prediction) < k + 2:
        repeating = repeating_value(g, k)
        places = fractional_digits(prediction)
        return repeating is not None and places >= 2 and p == rounded(repeating, places)
    return abs(p - g) <= Fraction(1, 2 * 10**k)


def repeating_value(gold: Fraction, places: int) -> Optional[Fraction]:
    """The repeating decimal a gold written with ``places`` >= 2 fractional digits is the rounding
    of, or None: the fraction of smallest denominator q <= 10**(places / 2), q not a product of 2s
    and 5s, within half a unit of the last place ("0.6667" -> 2/3, "83.33" -> 250/3, "6.11" ->
    55/9). Two fractions with denominators up to 10**(places / 2) are at least 10**-places apart,
    so at most one lies within the rounding interval: the rounding pins it down."""
    if places < 2:
        return None
    half, limit = Fraction(1, 2 * 10**places), math.isqrt(10**places)
    for denominator in range(3, limit + 1):
        rest = denominator
        for prime in (2, 5):
            while rest % prime == 0:
                rest //= prime
        candidate = Fraction(round(gold * denominator), denominator)
        if rest != 1 and candidate.denominator == denominator and abs(candidate - gold) < half:
            return candidate
    return None


def rounded(value: Fraction, places: int) -> Fraction:
    """``value`` rounded half away from zero to ``places`` fractional digits."""
    scaled = abs(value) * 10**places
    magnitude = Fraction(int(scaled + Fraction(1, 2)), 10**places)
    return -magnitude if value < 0 else magnitude


def log_abs_error(prediction: Fraction, gold: Fraction) -> float:
    """|sign(p) ln(1+|p|) - sign(g) ln(1+|g|)| (the spec's log-MAE term)."""

    def signed_log(x: Fraction) -> float:
        return math.copysign(math.log1p(abs(float(x))), float(x))

    return abs(signed_log(prediction) - signed_log(gold))


def digit_places(value: Fraction, fraction_digits: int) -> tuple[str, str]:
    """(integer digits, first ``fraction_digits`` fractional digits) of |value|, truncated, e.g.
    (583.33333.., 4) -> ("583", "3333")."""
    value = abs(value)
    integer = value.numerator // value.denominator
    rest = value - integer
    frac = "".join(str(int(rest * 10 ** (i + 1)) % 10) for i in range(fraction_digits))
    return str(integer), frac


def place_hits(prediction: Fraction, gold: Fraction, gold_text: str) -> dict[str, bool]:
    """Per place of the gold as written: does the prediction have the same digit there?

    Keys: "10^0" (units), "10^1" (tens), ..., "10^-1" (tenths), ...; the places are those the
    gold is written with; a place the prediction lacks counts as the digit 0."""
    k = fractional_digits(gold_text)
    gold_int, gold_frac = digit_places(gold, k)
    pred_int, pred_frac = digit_places(prediction, k)
    pred_int = pred_int.rjust(len(gold_int), "0")
    hits = {}
    for power in range(len(gold_int)):
        hits[f"10^{power}"] = gold_int[-1 - power] == pred_int[-1 - power]
    for i in range(k):
        hits[f"10^-{i + 1}"] = gold_frac[i] == pred_frac[i]
    return hits
