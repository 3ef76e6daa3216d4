//! Grid clustering, cluster summaries and ranges from block pairs against brute-force references:
//! cells from the coordinate vectors themselves, summaries from plain loops, ranges through the
//! dense mask of the (i, j) entries they cover.

use std::collections::BTreeSet;
use std::ops::Range;

use engine::clustering::{cluster_summary, grid_cells, label_counts, order_by_label, Points};
use engine::{BlockRanges, Ranges};

/// SplitMix64: a small deterministic generator (also the K-NN search's tests').
pub struct Rng(pub u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unif(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in 0..n.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Labels by brute force: cell coordinate vectors, numbered in their lexicographic order.
fn reference_labels(x: &[f64], n: usize, d: usize, size: &[f64]) -> (Vec<u32>, usize) {
    let min: Vec<f64> = (0..d).map(|k| x[k * n..(k + 1) * n].iter().copied().fold(f64::INFINITY, f64::min)).collect();
    let cell = |i: usize| -> Vec<f64> { (0..d).map(|k| ((x[k * n + i] - min[k]) / size[k]).floor()).collect() };
    let mut distinct: Vec<Vec<f64>> = (0..n).map(cell).collect();
    distinct.sort_by(|a, b| a.partial_cmp(b).unwrap());
    distinct.dedup();
    let labels = (0..n).map(|i| distinct.iter().position(|c| *c == cell(i)).unwrap() as u32).collect();
    (labels, distinct.len())
}

/// n points in d dimensions spread over `spread`, with some exact duplicates.
fn random_points(rng: &mut Rng, n: usize, d: usize, spread: f64) -> Vec<f64> {
    let mut x: Vec<f64> = (0..n * d).map(|_| spread * (rng.unif() - 0.3)).collect();
    for _ in 0..n / 5 {
        let (a, b) = (rng.below(n), rng.below(n));
        for k in 0..d {
            x[k * n + a] = x[k * n + b];
        }
    }
    x
}

fn check_grid(x: &[f64], n: usize, d: usize, size: &[f64]) {
    let cells = grid_cells(Points::new(x, n, d).unwrap(), size).unwrap();
    let (labels, count) = reference_labels(x, n, d, size);
    assert_eq!(cells.count, count, "count, n = {n}, d = {d}, size = {size:?}");
    assert_eq!(cells.labels, labels, "labels, n = {n}, d = {d}, size = {size:?}");
}

#[test]
fn grid_cells_match_brute_force() {
    let mut rng = Rng(1);
    for &d in &[1, 2, 3, 5] {
        for &n in &[0, 1, 7, 300] {
            let x = random_points(&mut rng, n, d, 1.0);
            // Table path (small grid), sorted keys (grid > 4n and 2^20 cells, < 2^64), coordinate sort (>= 2^64).
            for base in [0.137, 0.0713, 3.1e-7, 1e-12] {
                let size: Vec<f64> = (0..d).map(|k| base * (1.0 + 0.29 * k as f64)).collect();
                check_grid(&x, n, d, &size);
            }
        }
    }
    // Points exactly on cell boundaries, and all points equal.
    let x: Vec<f64> = (0..40).map(|i| (i % 10) as f64 * 0.1).collect();
    check_grid(&x, 20, 2, &[0.1, 0.3]);
    check_grid(&[2.5; 12], 4, 3, &[0.5, 1.0, 7.0]);
    // Coordinates beyond 2^53, whose extent rounds down to the largest coordinate.
    check_grid(&[0.0, 1.0, 1.0, 0.0], 2, 2, &[1.0, 1e-16]);
    // Huge grid, D = 5: far more than 2^64 cells.
    let x = random_points(&mut rng, 500, 5, 1.0);
    check_grid(&x, 500, 5, &[1e-12; 5]);
    let empty = grid_cells(Points::new(&[], 0, 3).unwrap(), &[1.0; 3]).unwrap();
    assert_eq!((empty.labels.len(), empty.count), (0, 0));
}

#[test]
fn large_grids_sorts_and_gathers_on_every_core_match_plain_loops() {
    // Sizes that split into several parts, not multiples of the blocks; labels numbered through
    // coordinate vectors in a BTreeMap (the brute-force reference is quadratic).
    let mut rng = Rng(5);
    let (n, d) = (200_003, 3);
    let x = random_points(&mut rng, n, d, 1.0);
    for size in [[0.05, 0.07, 0.11], [0.003, 0.002, 0.004]] {
        let cells = grid_cells(Points::new(&x, n, d).unwrap(), &size).unwrap();
        let min: Vec<f64> = (0..d).map(|k| x[k * n..(k + 1) * n].iter().copied().fold(f64::INFINITY, f64::min)).collect();
        let cell = |i: usize| -> Vec<i64> { (0..d).map(|k| ((x[k * n + i] - min[k]) / size[k]).floor() as i64).collect() };
        let distinct: std::collections::BTreeMap<Vec<i64>, u32> =
            (0..n).map(|i| (cell(i), 0)).collect::<std::collections::BTreeMap<_, _>>().into_keys().zip(0..).collect();
        assert_eq!(cells.count, distinct.len(), "size {size:?}");
        assert!((0..n).all(|i| cells.labels[i] == distinct[&cell(i)]), "size {size:?}");
    }
    for count in [1, 97, 150_000] {
        let labels: Vec<u32> = (0..n).map(|_| rng.below(count) as u32).collect();
        let mut want: Vec<usize> = (0..n).collect();
        want.sort_by_key(|&i| labels[i]); // (stable)
        let mut counts = vec![0; count];
        labels.iter().for_each(|&l| counts[l as usize] += 1);
        assert_eq!(order_by_label(&labels, count), (want, counts.clone()), "{count} labels");
        assert_eq!(label_counts(&labels, count), counts, "{count} labels");
    }
    let points = Points::new(&x, n, d).unwrap();
    let order: Vec<usize> = (0..n).map(|_| rng.below(n)).collect();
    let rows = points.rows_in_order(&order);
    assert!((0..d).all(|c| (0..n).all(|r| rows[c * n + r] == x[c * n + order[r]])));
}

#[test]
fn grid_cells_errors() {
    let x = [0.1, 0.5, 0.9, 1.0, 2.0, 3.0];
    let points = Points::new(&x, 3, 2).unwrap();
    for size in [[0.0, 1.0], [1.0, -0.5], [f64::NAN, 1.0], [1.0, f64::INFINITY]] {
        assert!(grid_cells(points, &size).is_err(), "size {size:?}");
    }
    assert!(grid_cells(points, &[1.0]).is_err());
    let nan = [0.1, f64::NAN, 0.9, 1.0, 2.0, 3.0];
    assert!(grid_cells(Points::new(&nan, 3, 2).unwrap(), &[1.0, 1.0]).is_err());
    assert!(Points::new(&x, 2, 2).is_err());
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1e-300) || (a == 0.0 && b == 0.0)
}

#[test]
fn cluster_summary_matches_loops() {
    let mut rng = Rng(2);
    let (n, d, clusters) = (60, 3, 6);
    let x: Vec<f64> = (0..n * d).map(|_| 4.0 * rng.unif() - 1.0).collect();
    // Cluster 4 empty; some zero weights, never a whole cluster's.
    let labels: Vec<u32> = (0..n).map(|i| [0, 1, 2, 3, 5][if i < 5 { i } else { rng.below(5) }]).collect();
    let w: Vec<f64> = (0..n).map(|i| if i >= 5 && i % 4 == 0 { 0.0 } else { rng.unif() + 0.01 }).collect();
    for weights in [Some(&w[..]), None] {
        let s = cluster_summary(Points::new(&x, n, d).unwrap(), &labels, clusters, weights).unwrap();
        let wt = |i: usize| weights.map_or(1.0, |w| w[i]);
        for c in 0..clusters {
            let members: Vec<usize> = (0..n).filter(|&i| labels[i] as usize == c).collect();
            assert_eq!(s.counts[c], members.len());
            let total: f64 = members.iter().map(|&i| wt(i)).sum();
            assert!(close(s.weights[c], total), "weight of cluster {c}");
            if members.is_empty() {
                assert!(s.radii[c].is_nan() && (0..d).all(|k| s.centroids[k * clusters + c].is_nan()));
                continue;
            }
            let centroid: Vec<f64> =
                (0..d).map(|k| members.iter().map(|&i| wt(i) * x[k * n + i]).sum::<f64>() / total).collect();
            for (k, &want) in centroid.iter().enumerate() {
                assert!(close(s.centroids[k * clusters + c], want), "centroid {c}, {k}");
            }
            let radius = members
                .iter()
                .map(|&i| (0..d).map(|k| (x[k * n + i] - centroid[k]).powi(2)).sum::<f64>().sqrt())
                .fold(0.0, f64::max);
            assert!(close(s.radii[c], radius), "radius {c}: {} vs {radius}", s.radii[c]);
        }
    }
    // A non-empty cluster whose weights sum to 0; a label out of range.
    let mut zero = w.clone();
    (0..n).filter(|&i| labels[i] == 2).for_each(|i| zero[i] = 0.0);
    assert!(cluster_summary(Points::new(&x, n, d).unwrap(), &labels, clusters, Some(&zero)).is_err());
    assert!(cluster_summary(Points::new(&x, n, d).unwrap(), &labels, 5, None).is_err());
}

/// Sorted, disjoint blocks with gaps (some none: blocks that touch), some empty, odd sizes; and n.
fn random_blocks(rng: &mut Rng) -> (Vec<Range<usize>>, usize) {
    let count = 1 + rng.below(9);
    let mut pos = rng.below(3);
    let blocks = (0..count)
        .map(|_| {
            let start = pos + [0, 0, 1, 3][rng.below(4)];
            pos = start + [0, 1, 2, 5, 7][rng.below(5)];
            start..pos
        })
        .collect();
    (blocks, pos + rng.below(3))
}

/// The (out, reduced) entries covered by one side of the ranges, with the shape checks.
fn covered(r: &BlockRanges, blocks: &[Range<usize>]) -> BTreeSet<(usize, usize)> {
    assert_eq!(r.blocks, blocks);
    assert_eq!(r.slices.len(), blocks.len());
    let mut set = BTreeSet::new();
    let mut first = 0;
    for (block, &end) in r.blocks.iter().zip(&r.slices) {
        let mine = &r.reduced[first..end];
        assert!(mine.iter().all(|q| q.start < q.end), "empty range in {mine:?}");
        assert!(mine.windows(2).all(|w| w[0].end < w[1].start), "unsorted or touching ranges {mine:?}");
        for a in block.clone() {
            set.extend(mine.iter().flat_map(Range::clone).map(|b| (a, b)));
        }
        first = end;
    }
    assert_eq!(first, r.reduced.len());
    set
}

#[test]
fn from_block_pairs_covers_the_kept_pairs() {
    let mut rng = Rng(3);
    for trial in 0..40 {
        let (bi, n_i) = random_blocks(&mut rng);
        let (bj, n_j) = random_blocks(&mut rng);
        let npairs = if trial == 0 { 0 } else { rng.below(3 * bi.len() * bj.len()) };
        let pairs: Vec<(usize, usize)> = (0..npairs).map(|_| (rng.below(bi.len()), rng.below(bj.len()))).collect();
        let r = Ranges::from_block_pairs(&bi, &bj, &pairs).unwrap();
        r.validate(n_i, n_j).unwrap();
        let mut expected = BTreeSet::new();
        for &(k, l) in &pairs {
            for a in bi[k].clone() {
                expected.extend(bj[l].clone().map(|b| (a, b)));
            }
        }
        let ctx = format!("blocks_i {bi:?}, blocks_j {bj:?}, pairs {pairs:?}");
        assert_eq!(covered(&r.i, &bi), expected, "i side: {ctx}");
        let transposed: BTreeSet<(usize, usize)> = expected.iter().map(|&(a, b)| (b, a)).collect();
        assert_eq!(covered(&r.j, &bj), transposed, "j side: {ctx}");
    }
    let blocks = [0..2, 2..5];
    assert!(Ranges::from_block_pairs(&blocks, &blocks[..1], &[(0, 0), (1, 1)]).is_err());
    assert!(Ranges::from_block_pairs(&blocks, &blocks, &[(2, 0)]).is_err());
}

/// The two-scale solver's cells: the summary computed cell by cell on every core is, bit for bit,
/// `cluster_summary` of the sorted points (the same sums in the same order), over enough cells
/// (~1500, odd counts) for several cores' parts; the box is the columns' bounds; weights that are
/// not numbers or sum to 0 in a cell are refused.
#[test]
fn sorted_cells_summarise_as_cluster_summary_does() {
    use engine::clustering::column_bounds;
    use engine::two_scale::sorted_cells;
    let mut rng = Rng(5);
    let (n, d) = (20011, 3);
    let x = random_points(&mut rng, n, d, 3.0);
    let la: Vec<f64> = (0..n).map(|_| (rng.unif() + 0.05).ln()).collect();
    let points = Points::new(&x, n, d).unwrap();
    let size = [0.2, 0.25, 0.3];
    let c = sorted_cells(points, &size, &la).unwrap();
    let cells = c.blocks.len();
    assert!(cells > 1000, "{cells} cells");
    let labels: Vec<u32> = c.blocks.iter().enumerate().flat_map(|(l, b)| b.clone().map(move |_| l as u32)).collect();
    let weights: Vec<f64> = c.log_weights.iter().map(|v| v.exp()).collect();
    let want = cluster_summary(Points::new(&c.sorted, n, d).unwrap(), &labels, cells, Some(&weights)).unwrap();
    assert_eq!(c.summary, want);
    assert_eq!(c.bounds, column_bounds(points, "x").unwrap());
    let mut zero = la.clone();
    c.order[c.blocks[7].clone()].iter().for_each(|&i| zero[i] = f64::NEG_INFINITY);
    assert!(sorted_cells(points, &size, &zero).unwrap_err().to_string().contains("sum to 0"));
    let mut nan = la;
    nan[3] = f64::NAN;
    assert!(sorted_cells(points, &size, &nan).is_err());
}

/// Column sums on every core (1e6 rows: several threads) against a sum in order, to the rounding of
/// the parts' order; a value that is not finite makes its column's sum not finite.
#[test]
fn column_sums_are_the_columns_sums() {
    use engine::clustering::column_sums;
    let (n, d) = (1_000_003, 3);
    let x: Vec<f64> = (0..n * d).map(|k| ((k * 7919) % 1000) as f64 / 7.0 - 50.0).collect();
    let got = column_sums(Points::new(&x, n, d).unwrap());
    for (c, sum) in got.iter().enumerate() {
        let want: f64 = x[c * n..(c + 1) * n].iter().sum();
        assert!((sum - want).abs() <= 1e-9 * x[c * n..(c + 1) * n].iter().map(|v| v.abs()).sum::<f64>(), "column {c}");
    }
    let mut y = x.clone();
    y[n + 17] = f64::NAN;
    y[2 * n + 5] = f64::INFINITY;
    let got = column_sums(Points::new(&y, n, d).unwrap());
    assert!(got[0].is_finite() && got[1].is_nan() && got[2] == f64::INFINITY, "{got:?}");
}

/// Sums of squared deviations on every core against a sum in order, to the rounding of the parts'
/// order.
#[test]
fn column_squares_are_the_sums_of_squared_deviations() {
    use engine::clustering::column_squares;
    let (n, d) = (1_000_003, 3);
    let x: Vec<f64> = (0..n * d).map(|k| ((k * 7919) % 1000) as f64 / 7.0 - 50.0).collect();
    let m = [3.0, -1.0, 1e3];
    let got = column_squares(Points::new(&x, n, d).unwrap(), &m);
    for (c, sum) in got.iter().enumerate() {
        let want: f64 = x[c * n..(c + 1) * n].iter().map(|v| (v - m[c]) * (v - m[c])).sum();
        assert!((sum - want).abs() <= 1e-12 * want, "column {c}: {sum} against {want}");
    }
}

/// Points moved and scaled on every core (1e6 rows: several threads) against the arithmetic done
/// value by value, to the bit.
#[test]
fn moved_columns_are_the_points_moved_and_scaled() {
    use engine::clustering::moved_columns;
    let (n, d) = (1_000_003, 3);
    let x: Vec<f64> = (0..n * d).map(|k| ((k * 7919) % 1000) as f64 / 7.0 - 50.0).collect();
    let (shift, scale) = ([1.5, -2.25, 1e3], [1.0, 0.3, -7.0]);
    let mut out = vec![0.0; n * d];
    moved_columns(Points::new(&x, n, d).unwrap(), &shift, &scale, &mut out);
    for (e, (&got, &v)) in out.iter().zip(&x).enumerate() {
        let k = e / n;
        assert_eq!(got.to_bits(), ((v - shift[k]) * scale[k]).to_bits(), "row {} column {k}", e % n);
    }
}

/// The clusters' sums of squares on every core (several blocks of rows, a cluster with no point)
/// against a loop over the points; labels that are not clusters are an error.
#[test]
fn cluster_squares_are_the_clusters_sums_of_squares() {
    use engine::clustering::cluster_squares;
    let (n, d, k) = (200_003, 2, 5);
    let x: Vec<f64> = (0..n * d).map(|e| ((e * 7919) % 1000) as f64 / 9.0).collect();
    let labels: Vec<f64> = (0..n).map(|r| [1.0, 2.0, 4.0, 5.0][(r * 31) % 4]).collect();   // (3: empty)
    let centers: Vec<f64> = (0..k * d).map(|e| e as f64 * 10.0).collect();
    let mut want = vec![0.0; k];
    for r in 0..n {
        let l = labels[r] as usize - 1;
        want[l] += (0..d).map(|c| (x[c * n + r] - centers[c * k + l]).powi(2)).sum::<f64>();
    }
    let got = cluster_squares(Points::new(&x, n, d).unwrap(), &labels, &centers).unwrap();
    assert_eq!(got[2], 0.0);
    for l in 0..k {
        assert!((got[l] - want[l]).abs() <= 1e-12 * want[l], "cluster {l}: {} against {}", got[l], want[l]);
    }
    for bad in [0.0, 6.0, 1.5, f64::NAN] {
        let mut wrong = labels.clone();
        wrong[n - 1] = bad;
        assert!(cluster_squares(Points::new(&x, n, d).unwrap(), &wrong, &centers).is_err(), "label {bad}");
    }
    assert!(cluster_squares(Points::new(&x, n, d).unwrap(), &labels[1..], &centers).is_err());
}
