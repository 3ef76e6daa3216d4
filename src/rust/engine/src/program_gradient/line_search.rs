//! The line search of the L-BFGS minimiser (`lbfgs`): a step along a descent direction that meets
//! the strong Wolfe conditions (sufficient decrease, `C1`, and curvature, `C2`: L-BFGS-B's `ftol`
//! and `gtol`), found by bracketing then zooming with safeguarded cubic interpolation (Nocedal and
//! Wright, *Numerical Optimization*, algorithms 3.5 and 3.6). A value that is not finite (a step
//! too far for the model) counts as too high: the search comes back towards the start.

use crate::error::Result;

/// Sufficient decrease: f(a) <= f(0) + C1 a f'(0).
const C1: f64 = 1e-3;
/// Curvature: |f'(a)| <= C2 |f'(0)|.
const C2: f64 = 0.9;
/// The most evaluations of one search (L-BFGS-B gives up after 20 as well).
pub(crate) const MAX_EVALUATIONS: usize = 20;

/// A point of the line: the step `a`, the value `f`, the slope `slope` (gradient . direction) and
/// what the objective gave there (the point and its gradient), kept to be returned.
#[derive(Debug, Clone)]
pub(crate) struct Point {
    pub a: f64,
    pub f: f64,
    pub slope: f64,
    pub x: Vec<f64>,
    pub g: Vec<f64>,
}

impl Point {
    /// Whether the point is too high to be kept: its value or its slope (its gradient) not finite,
    /// or above the sufficient-decrease line from `start`.
    fn too_high(&self, start: &Point) -> bool {
        !self.f.is_finite() || !self.slope.is_finite() || self.f > start.f + C1 * self.a * start.slope
    }
}

/// Searches the line `phi(a)` (which gives the point at step `a`) from `start` (step 0, negative
/// slope), trying the step `first` first. Returns the point found: one that meets both conditions;
/// else, when the evaluations run out, one that decreases the value enough (the caller then keeps
/// no curvature pair), or the lowest point below the start, or else one level with it (as
/// L-BFGS-B's search ends at its best point: in float32, the rounding of the value may hide a
/// decrease; the minimiser's `factr` test then stops on the zero reduction, as L-BFGS-B's does);
/// `None` when every step raised the value.
pub(crate) fn search(start: &Point, first: f64, phi: &mut impl FnMut(f64) -> Result<Point>) -> Result<Option<Point>> {
    let mut best: Option<Point> = None;
    let found = {
        let mut recorded = |a: f64| -> Result<Point> {
            let p = phi(a)?;
            let lower = best.as_ref().map_or(start.f, |b| b.f);
            if (p.f < lower || (best.is_none() && p.f == start.f)) && p.slope.is_finite() {
                best = Some(p.clone());
            }
            Ok(p)
        };
        wolfe(start, first, &mut recorded)?
    };
    Ok(found.or(best))
}

/// The search proper: a point that meets both conditions, or one that meets the first when the
/// evaluations run out.
fn wolfe(start: &Point, first: f64, phi: &mut impl FnMut(f64) -> Result<Point>) -> Result<Option<Point>> {
    let mut prev = start.clone();
    let mut a = first;
    for i in 0..MAX_EVALUATIONS {
        let p = phi(a)?;
        if p.too_high(start) || (i > 0 && p.f >= prev.f) {
            return zoom(start, prev, p, MAX_EVALUATIONS - i - 1, phi);
        }
        if p.slope.abs() <= -C2 * start.slope {
            return Ok(Some(p));
        }
        if p.slope >= 0.0 {
            return zoom(start, p, prev, MAX_EVALUATIONS - i - 1, phi);
        }
        // Further along: the cubic's minimiser, kept between 1.1 and 4 times the last stretch.
        let stretch = p.a - prev.a;
        let guess = cubic_minimiser(&prev, &p).unwrap_or(f64::INFINITY);
        a = guess.clamp(p.a + 1.1 * stretch, p.a + 4.0 * stretch);
        prev = p;
    }
    Ok(Some(prev).filter(|p| p.a > 0.0))
}

/// Zooms in between `lo` (the best point so far, sufficient decrease met) and `hi` (the other end
/// of an interval that holds a point meeting both conditions), with at most `budget` evaluations.
fn zoom(
    start: &Point,
    mut lo: Point,
    mut hi: Point,
    budget: usize,
    phi: &mut impl FnMut(f64) -> Result<Point>,
) -> Result<Option<Point>> {
    for _ in 0..budget {
        let width = hi.a - lo.a;
        if width.abs() <= 1e-14 * lo.a.abs().max(hi.a.abs()) {
            break;
        }
        // The cubic's minimiser, kept 10% of the interval away from its ends; the middle when
        // `hi` is not finite.
        let middle = lo.a + 0.5 * width;
        let guess =
            if hi.f.is_finite() && hi.slope.is_finite() { cubic_minimiser(&lo, &hi).unwrap_or(middle) } else { middle };
        let (low, high) = (lo.a + 0.1 * width, hi.a - 0.1 * width);
        let a = if width > 0.0 { guess.clamp(low, high) } else { guess.clamp(high, low) };
        let p = phi(a)?;
        if p.too_high(start) || p.f >= lo.f {
            hi = p;
        } else {
            if p.slope.abs() <= -C2 * start.slope {
                return Ok(Some(p));
            }
            if p.slope * (hi.a - lo.a) >= 0.0 {
                hi = lo;
            }
            lo = p;
        }
    }
    Ok(Some(lo).filter(|p| p.a > 0.0))
}

/// The minimiser of the cubic through two points' values and slopes, if it has one.
fn cubic_minimiser(p: &Point, q: &Point) -> Option<f64> {
    let d1 = p.slope + q.slope - 3.0 * (p.f - q.f) / (p.a - q.a);
    let disc = d1 * d1 - p.slope * q.slope;
    if disc.is_nan() || disc < 0.0 {
        return None;
    }
    let d2 = (q.a - p.a).signum() * disc.sqrt();
    let t = q.a - (q.a - p.a) * (q.slope + d2 - d1) / (q.slope - p.slope + 2.0 * d2);
    t.is_finite().then_some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(a: f64, f: f64, slope: f64) -> Point {
        Point { a, f, slope, x: vec![a], g: vec![slope] }
    }

    #[test]
    fn cubic_minimiser_is_exact_for_a_cubic() {
        // f(a) = (a - 2)^2 (a + 1)... a cubic with a local minimum at a = 2
        let f = |a: f64| (a - 2.0).powi(2) * (a + 1.0);
        let df = |a: f64| 2.0 * (a - 2.0) * (a + 1.0) + (a - 2.0).powi(2);
        let m = cubic_minimiser(&point(0.0, f(0.0), df(0.0)), &point(3.0, f(3.0), df(3.0))).unwrap();
        assert!((m - 2.0).abs() < 1e-12, "{m}");
    }

    #[test]
    fn finds_a_wolfe_point_of_a_quadratic_and_backs_off_non_finite_values() {
        // phi(a) = (a - 3)^2, NaN beyond a = 5, its slope NaN beyond a = 4
        let mut phi = |a: f64| -> Result<Point> {
            let f = if a > 5.0 { f64::NAN } else { (a - 3.0).powi(2) };
            Ok(point(a, f, if a > 4.0 { f64::NAN } else { 2.0 * (a - 3.0) }))
        };
        let start = point(0.0, 9.0, -6.0);
        for first in [0.01, 1.0, 100.0] {
            let p = search(&start, first, &mut phi).unwrap().unwrap();
            assert!(p.f <= 9.0 + C1 * p.a * -6.0, "first {first}: {p:?}");
            assert!(p.slope.abs() <= C2 * 6.0, "first {first}: {p:?}");
        }
    }

    #[test]
    fn ends_at_the_lowest_point_when_rounding_hides_the_decrease() {
        // every step 1e-12 below the start, with a slope that says it should be far lower (as a
        // float32 value at its rounding floor): no step meets the conditions, the lowest is kept
        let mut calls = 0;
        let mut phi = |a: f64| -> Result<Point> {
            calls += 1;
            Ok(point(a, 1.0 - 1e-12 * (1.0 + (calls % 3) as f64), 1.0))
        };
        let p = search(&point(0.0, 1.0, -1.0), 1.0, &mut phi).unwrap().unwrap();
        assert_eq!(p.f, 1.0 - 3e-12);
        // level with the start: a point of the same value (the minimiser then stops on `factr`)
        let mut flat = |a: f64| -> Result<Point> { Ok(point(a, 1.0, 1.0)) };
        let p = search(&point(0.0, 1.0, -1.0), 1.0, &mut flat).unwrap().unwrap();
        assert!(p.f == 1.0 && p.a > 0.0);
        // every step higher: none
        let mut higher = |a: f64| -> Result<Point> { Ok(point(a, 1.001 + a, 1.0)) };
        assert!(search(&point(0.0, 1.0, -1.0), 1.0, &mut higher).unwrap().is_none());
    }
}
