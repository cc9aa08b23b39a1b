import numpy as np
import pytest

from ntklab.analysis.fits import average_repeats, fit_power_law


def test_exact_power_law_recovers_slope_and_intercept():
    x = np.array([30, 100, 300, 1000, 3000.0])
    fit = fit_power_law(list(x), list(2.5 * x**-0.5))
    assert fit.slope == pytest.approx(-0.5, abs=1e-12)
    assert np.exp(fit.intercept) == pytest.approx(2.5, rel=1e-12)
    assert fit.r_squared == pytest.approx(1.0, abs=1e-12)
    assert fit.slope_low == pytest.approx(-0.5, abs=1e-9) and fit.slope_high == pytest.approx(-0.5, abs=1e-9)


def test_slope_and_interval_match_numpy_least_squares():
    rng = np.random.default_rng(0)
    x = np.geomspace(10, 1e5, 7)
    y = 3 * x**-0.3 * np.exp(rng.normal(0, 0.1, x.size))
    fit = fit_power_law(list(x), list(y))
    lx, ly = np.log(x), np.log(y)
    slope, intercept = np.polyfit(lx, ly, 1)
    residuals = ly - (slope * lx + intercept)
    stderr = np.sqrt(residuals @ residuals / (x.size - 2) / np.sum((lx - lx.mean()) ** 2))
    t975_df5 = 2.570581835636314
    assert fit.slope == pytest.approx(slope, rel=1e-10)
    assert fit.slope_high - fit.slope == pytest.approx(t975_df5 * stderr, rel=1e-8)
    assert fit.r_squared == pytest.approx(1 - residuals @ residuals / np.sum((ly - ly.mean()) ** 2), rel=1e-10)


def test_interval_covers_true_slope_about_95_percent_of_the_time():
    rng = np.random.default_rng(1)
    x = np.geomspace(30, 3e4, 6)
    covered = 0
    trials = 2000
    for _ in range(trials):
        y = x**-0.5 * np.exp(rng.normal(0, 0.2, x.size))
        fit = fit_power_law(list(x), list(y))
        covered += fit.slope_low <= -0.5 <= fit.slope_high
    assert 0.935 <= covered / trials <= 0.965


def test_seeds_at_one_width_are_averaged_before_fitting():
    xs = [100, 100, 100, 1000, 1000, 1000]
    ys = [1.0, 2.0, 3.0, 0.1, 0.2, 0.3]
    points = average_repeats(xs, ys)
    assert [(p.x, p.y_mean, p.runs) for p in points] == [(100.0, 2.0, 3), (1000.0, pytest.approx(0.2), 3)]
    assert points[0].y_std == pytest.approx(1.0)
    fit = fit_power_law(xs, ys)
    assert fit.slope == pytest.approx(-1.0)
    assert fit.slope_low is None  # two points leave no residual degrees of freedom


def test_non_positive_and_missing_values_are_dropped_and_too_few_points_give_none():
    assert fit_power_law([1, 10], [0.0, None]) is None
    assert fit_power_law([1, 10, 100], [1.0, float("nan"), 0.01]).slope == pytest.approx(-1.0)


def test_flat_data_has_zero_slope_zero_width_interval_and_no_r_squared():
    fit = fit_power_law([10, 100, 1000], [2.0, 2.0, 2.0])
    assert fit.slope == pytest.approx(0.0, abs=1e-12)
    assert fit.slope_low == pytest.approx(0.0, abs=1e-12) and fit.slope_high == pytest.approx(0.0, abs=1e-12)
    assert fit.r_squared is None
