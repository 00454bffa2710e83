"""The price arithmetic: Azure bills every storage call, an empty get included.

A month is 30 days, as in the design's arithmetic: 79,200 transactions a day x 30 / 10,000 x $0.01
= $2.376 a month.
"""

from __future__ import annotations

DEFAULT_PRICE_PER_10K_USD = 0.01
"""The design's 2014 price of 10,000 queue transactions; set today's price for your account."""
DAYS_PER_MONTH = 30
HOURS_PER_MONTH = 24 * DAYS_PER_MONTH


def cost_usd(transactions: float, price_per_10k_usd: float = DEFAULT_PRICE_PER_10K_USD) -> float:
    """What ``transactions`` storage transactions cost."""
    return transactions / 10_000 * price_per_10k_usd


def monthly_cost_usd(
    transactions_per_day: float, price_per_10k_usd: float = DEFAULT_PRICE_PER_10K_USD
) -> float:
    """A month of days like this one."""
    return cost_usd(transactions_per_day * DAYS_PER_MONTH, price_per_10k_usd)


def monthly_cost_from_hourly_usd(
    transactions_per_hour: float, price_per_10k_usd: float = DEFAULT_PRICE_PER_10K_USD
) -> float:
    """A month of hours like this one."""
    return cost_usd(transactions_per_hour * HOURS_PER_MONTH, price_per_10k_usd)
