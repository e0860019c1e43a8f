"""Unit constants. Bytes are integers throughout the package; a figure is printed in
GiB or GB by dividing by the constant here, and its name or label says which.

GiB = 2**30 bytes (what runtimes and `nvidia-smi` report), GB = 10**9 bytes (what
datasheets and seed 003 print).
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Context, Decimal

KiB = 1024
MiB = 1024**2
GiB = 1024**3
GB = 10**9
HOURS_PER_MONTH = 730  # 8,760 hours a year / 12, the convention of cloud price sheets
HOURS_PER_QUARTER = 3 * HOURS_PER_MONTH  # 2,190: four quarters make the price sheets' 8,760-hour year


def quantile_label(q: float) -> str:
    """A quantile as a percentile label: 0.99 -> 'p99', 0.995 -> 'p99.5'."""
    return f"p{round(100 * q, 3):g}"


def tokens_text(tokens: float) -> str:
    """A length percentile as whole tokens ('1,235'), the one way `planner histogram`'s table and a report's
    traffic table print one: rounded once, half up, from the unrounded value. The table used to round
    `histogram --json`'s tenth (600.5) again, with format's half-even: Azure conv's output p99, 600.51,
    printed 600 there and 601 in the report."""
    return f"{Decimal(float(tokens)).quantize(Decimal(1), rounding=ROUND_HALF_UP):,}"


def share_text(share: float) -> str:
    """A share as a percentage to 0.1%; one that is not zero never reads 0.0% ("<0.1%")."""
    return "<0.1%" if 0 < share < 0.0005 else f"{share:.1%}"


def counted_text(n: int, noun: str) -> str:
    """A count in words, the noun in the plural unless it is one: '1 row', '1,200 rows'."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def gpus_text(n: int) -> str:
    """A count of GPUs in words: '1 GPU', '22 GPUs'."""
    return counted_text(n, "GPU")


def gpu_types_text(n: int) -> str:
    """A count of GPU types in words: '1 GPU type', '2 GPU types'."""
    return counted_text(n, "GPU type")


def quarters_text(n: int) -> str:
    """A count of quarters in words: '1 quarter', '4 quarters'."""
    return counted_text(n, "quarter")


def replicas_text(n: int) -> str:
    """A count of replicas in words: '1 replica', '4 replicas'."""
    return counted_text(n, "replica")


# Significant digits a dollar figure is read to before it is rounded for display, at least: a
# float's noise lies in its 16th or 17th digit; an amount to the cent below $10 billion needs 12,
# and a larger one is read to a digit past the one shown.
_MONEY_DIGITS = 12
_MONEY_CONTEXT = Context(prec=80)  # room for any float's digits: quantize fails past the context's precision


def rounded_usd(usd: float, digits: int = 2) -> Decimal:
    """A dollar amount to `digits` decimals, half a unit away from zero, as a person rounds the
    amount the arithmetic denotes. Python's rounding reads the binary float instead: 115 GPUs at
    $2.093 plus 30 at $4.445 (133.35 / 30) and the rest make $404.285, held as 404.28499999999997,
    which '{:.2f}' shows as $404.28 where a hand calculation gives $404.29, and one price showed as
    $4.45 in one quarter and $4.44 in the next. The float's last digits are dropped first."""
    significant = max(_MONEY_DIGITS, len(f"{abs(usd):.0f}") + digits + 1)
    exact = Decimal(f"{usd:.{significant}g}")
    return exact.quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP, context=_MONEY_CONTEXT)


def usd_text(usd: float | None) -> str:
    """An amount of US dollars to the cent (rounded_usd), '−$3.36' below zero (a saving that is a cost;
    less than half a cent below zero reads $0.00); '—' for none (a cost no plan has, or nothing to price)."""
    if usd is None or not math.isfinite(usd):
        return "—"
    return _dollars(rounded_usd(usd))


def _dollars(rounded: Decimal, spec: str = ",") -> str:
    """A rounded dollar amount with its sign before the dollar sign, '−$3.36', as an amount is read
    (not Python's '$-3.36'), a minus sign and not a hyphen; an amount that rounded to zero has none."""
    # copy_abs, not abs(): it keeps every digit (abs() rounds to the context's 28)
    return f"{'−' if rounded < 0 else ''}${format(rounded.copy_abs(), spec)}"


def delta_text(usd: float, base_usd: float) -> str:
    """A cost against a base: '+$7.40 (+7%)', '−$53.82 (−69%)', 'same' within half a cent; '—' for none."""
    if not math.isfinite(usd):
        return "—"
    d = usd - base_usd
    if abs(d) < 0.005:
        return "same"
    return f"{'+' if d > 0 else '−'}{usd_text(abs(d))} ({d / base_usd:+.0%})".replace("(-", "(−")


def significant_text(x: float, digits: int = 4) -> str:
    """x rounded to `digits` significant digits, in fixed notation: 0.09423, 0.2633, 2.828, 10.00 (for
    9.99996), 12,350 (for 12,345.6)."""
    if x == 0 or not math.isfinite(x):
        return f"{x:,.{digits - 1}f}"
    rounded = float(f"{x:.{digits - 1}e}")  # the rounding first: 9.99996 carries to 10.00, not "10.000"
    return f"{rounded:,.{max(0, digits - 1 - math.floor(math.log10(abs(rounded))))}f}"


def gib_text(gib: float) -> str:
    """An amount of memory in GiB, without its unit: to the hundredth, or under 1 GiB to three
    significant digits, so that an amount shown beside its quotient divides to it ('floor(53.73 /
    0.125) = 429' where to the hundredth it read 0.12; a one-token request 0.0000119, not 0.00)."""
    return f"{gib:,.2f}" if abs(gib) >= 1 or gib == 0 or not math.isfinite(gib) else significant_text(gib, 3)


def usd_rate_text(usd_per_hour: float) -> str:
    """A price per GPU-hour: to the cent, or to the tenth or hundredth of a cent where fewer digits would
    round it (a 30% discount on $2.99 is $2.093, a 25% one $2.2425, and 17 GPUs at '$2.09' would not
    multiply to their cost); '—' for none."""
    if not math.isfinite(usd_per_hour):
        return "—"
    # The fewest digits that round to what four do: $2.1903 is not "$2.19", though three digits read 2.190.
    digits = next((d for d in (2, 3) if rounded_usd(usd_per_hour, d) == rounded_usd(usd_per_hour, 4)), 4)
    return _dollars(rounded_usd(usd_per_hour, digits))


def usd_per_million_tokens(usd: float, tokens: float) -> float | None:
    """Cost per million tokens, of a cost and the tokens served in the same time; None where no token
    is served (a demand grown down to nothing)."""
    return usd / tokens * 1e6 if tokens else None


def usd_per_million_text(usd: float | None) -> str:
    """A cost per million tokens to the hundredth of a cent (small figures need the digits), or under
    a cent to three significant digits ($0.00926, $0.0000420: a cost is not rounded to none, nor
    doubled, and a change from one quarter to the next reads closer to what it is: finance_2027's input
    price at peak read $0.0093 and $0.0094, a 1.25% change); '—' for none."""
    if usd is None or not math.isfinite(usd):
        return "—"
    if 0 < abs(usd) < 0.01:
        digits = 2 - math.floor(math.log10(abs(usd)))
        shown = rounded_usd(usd, digits)
        if abs(shown) >= Decimal(1).scaleb(3 - digits):  # rounding carried to the next power of ten: $0.0100, not $0.01000
            shown = rounded_usd(usd, digits - 1)
        return _dollars(shown, ",f")  # fixed notation: a Decimal's str turns to exponents past 1e-6
    return _dollars(rounded_usd(usd, 4))


def utilisation_text(share: float) -> str:
    """A utilisation in percent: whole, to a tenth at least above 100%, and with the decimals that keep
    it off 100% when it is not (a fleet over its peak by 0.4% is not "100%", which reads as exactly full)."""
    if not math.isfinite(share):
        return "—"
    # a tenth at least above 100%, and the fewest decimals that keep a share on its side of 100%
    for digits in range(1, 4) if share > 1 else range(2):
        text = f"{share:.{digits}%}"
        shown = float(text[:-1])
        if (shown > 100) == (share > 1) and (shown < 100) == (share < 1):
            return text
    return ">100%" if share > 1 else "<100%"


def multiplier_text(x: float) -> str:
    """A demand multiplier as the quarters' growths make it (1.15 × 1.15 = 1.3225, × 1.15 = 1.520875),
    not rounded to three places, which reads 1.3225 as 1.322."""
    return f"{x:.6f}".rstrip("0").rstrip(".")


def hours_text(*, quarters: bool) -> str:
    """The hours behind amounts per month (and per quarter), said wherever they are shown: a reader
    multiplies the hourly figure shown, rounded to the cent, and finds a difference (fleet_2027q1:
    $324.55 x 730 = $236,921.50 against $236,922.96 from the unrounded $324.552 an hour), at most half
    a cent times the hours."""
    month = usd_text(0.005 * HOURS_PER_MONTH)
    if not quarters:
        hours, amounts, bound = f"A month is {HOURS_PER_MONTH} hours", "A month's amount is", month
    else:
        hours = f"A month is {HOURS_PER_MONTH} hours and a quarter {HOURS_PER_QUARTER:,}"
        amounts, bound = "Amounts per month and per quarter are", (
            f"{month} a month and {usd_text(0.005 * HOURS_PER_QUARTER)} a quarter")
    # A forecast's sums show their parts (on demand + reserved + idle = total), each rounded on its own: an
    # outside probe added "$0.00 + $27.21 + $10.47" to $37.68 against the $37.67 shown ($27.209 + $10.465).
    parts = (" Each amount is rounded to the cent on its own, so the parts shown of a sum can add to a cent or so "
             "more or less than its total shown.") if quarters else ""
    return (f"{hours}: every hour of an {12 * HOURS_PER_MONTH:,}-hour year billed, the price sheets' convention. {amounts} the hourly "
            f"cost before rounding times those hours, so {'they' if quarters else 'it'} can differ from the rounded "
            f"hourly amount times them by up to {bound}.{parts}")


def resident_text(n: float | None) -> str:
    """A ceiling's resident sequences: whole where whole (the engine's batch limit), else to six significant
    digits, trailing zeros dropped (an unfloored memory concurrency, a latency bound's grid point): λ of it
    then rounds to the rate printed beside it (two decimals did not: a knee at 0.2018 read "0.20", where
    λ(0.20) gives the tpot ceiling's rate, not the knee's); '—' for none."""
    if n is None or not math.isfinite(n):
        return "—"
    if n == int(n):
        return f"{n:,.0f}"
    text = significant_text(n, 6)
    return text.rstrip("0").rstrip(".") if "." in text else text
