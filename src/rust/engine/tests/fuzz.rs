//! Fuzzing of the formula and argument parsers, and of running what they accept: mutations of valid
//! formulas (bytes, names, numbers, nesting 10^4 deep, long chains, huge strings) must end in an
//! `Operator` or an error with a message, never a panic, a stack overflow or an allocation failure;
//! what parses is run on small inputs, some of the wrong shape, with the same demand.
//!
//! Bounded in time: `FUZZ_SECONDS` (default 10, what `make test` runs; `make fuzz` runs longer) and
//! reproducible: every case comes from a seed, printed when it fails (`FUZZ_SEED` replays one,
//! `FUZZ_SHOW=1` prints each case, `FUZZ_START` is the first seed of a run).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use crate::common_formulas::SEEDS;
use engine::formula::Category;
use engine::{Backend, Input, Operator, Precision, RunOptions};


/// Names and numbers the mutations put in place of others, or anywhere.
const NAMES: &[&str] = &[
    "Exp", "Log", "Sum_Reduction", "ArgKMin_Reduction", "LogSumExp_Reduction", "Min_ArgMin_Reduction", "Grad",
    "TensorProd", "Elem", "Extract", "Concat", "OneHot", "SqDist", "Powf", "Pow", "IfElse", "Var", "IntCst",
    "MatVecMult", "Sum", "Norm2", "Vi", "Vj", "Pm", "x", "y", "b", "e", "p", "a", "z", "NaN", "inf",
];
const NUMBERS: &[&str] = &[
    "0", "1", "-1", "2", "3", "7", "0.5", "-0", "2147483648", "4294967297", "99999999999999999999", "1e400",
    "-1e-400", "1e9", "1048576", "1048577", "1e", ".", "1.5e-3",
];
const SYMBOLS: &[&str] = &["(", ")", ",", "=", "+", "-", "*", "/", "^", "|", " ", "\u{e9}", "\0", ""];

/// Formulas longer than the parser's limit (4 MiB) are generated, not much longer ones (the time
/// would go into building strings).
const MAX_GENERATED: usize = 6 << 20;
/// xorshift64: a dependency-free, seedable generator.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

/// A character boundary of `s` at or before `i`.
fn boundary(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The runs of letters, digits, '_' and '.' in `s`, as byte ranges.
fn tokens(s: &str) -> Vec<(usize, usize)> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.';
    let mut out = vec![];
    let mut start = None;
    for (i, c) in s.char_indices().chain([(s.len(), ' ')]) {
        match (start, word(c)) {
            (None, true) => start = Some(i),
            (Some(a), false) => {
                out.push((a, i));
                start = None;
            }
            _ => {}
        }
    }
    out
}

/// One random change of `s`: mostly small ones that keep it close to a valid formula, sometimes
/// huge nesting, long chains or long strings.
fn mutate(s: &str, rng: &mut Rng) -> String {
    let a = boundary(s, rng.below(s.len() + 1));
    let b = boundary(s, a + rng.below(12));
    let toks = tokens(s);
    let (ta, tb) = if toks.is_empty() { (a, b) } else { toks[rng.below(toks.len())] };
    let out = match rng.below(20) {
        0..=3 => format!("{}{}", &s[..a], &s[b..]),
        4..=6 => format!("{}{}{}", &s[..ta], rng.pick(NUMBERS), &s[tb..]),
        7..=9 => format!("{}{}{}", &s[..ta], rng.pick(NAMES), &s[tb..]),
        10 => format!("{}{}{}", &s[..a], rng.pick(SYMBOLS), &s[a..]),
        11 => format!("{}{}{}", &s[..a], rng.pick(NAMES), &s[a..]),
        12 => format!("{}{}{}", &s[..a], rng.pick(SYMBOLS), &s[b..]),
        13 => format!("{}{}{}", &s[..b], &s[a..b], &s[b..]),
        14 => {
            let byte = (rng.next() % 128) as u8 as char;
            format!("{}{byte}{}", &s[..a], &s[a..])
        }
        15 => {
            // Nesting 10 to 20000 deep.
            let depth = (10usize << rng.below(12)).min(MAX_GENERATED / 8);
            let op = rng.pick(&["Exp(", "(", "-", "Sqrt(", "Sum(", "Grad(", "Norm2("]);
            let close = if op.ends_with('(') { ")" } else { "" };
            format!("{}{}{}{}{}", &s[..ta], op.repeat(depth), &s[ta..tb], close.repeat(depth), &s[tb..])
        }
        16 => {
            // A chain of up to 10^5 terms.
            let terms = (1usize << rng.below(17)).min(MAX_GENERATED / (tb - ta + 1));
            let op = rng.pick(&["+", "*", "-", "/"]);
            format!("{}{}{}", &s[..ta], vec![&s[ta..tb]; terms].join(op), &s[tb..])
        }
        17 => s.repeat((1 + rng.below(4)).min(MAX_GENERATED / (s.len() + 1)).max(1)),
        18 => format!("{}{}{}", &s[..a], "x".repeat(1 << rng.below(23)), &s[a..]),
        _ => s.to_string(),
    };
    if out.len() > MAX_GENERATED {
        out[..boundary(&out, MAX_GENERATED)].to_string()
    } else {
        out
    }
}

/// Inputs for the variables of `op`, mostly of the declared shapes, sometimes not; None when the
/// declared shapes are too large to allocate in a test.
fn inputs_for(op: &Operator, rng: &mut Rng) -> Option<Vec<(Vec<f64>, usize, usize)>> {
    let (n_i, n_j) = (1 + rng.below(40), 1 + rng.below(40));
    let mut inputs = vec![];
    for v in &op.formula.variables {
        let mut nrow = match v.category {
            Category::I => n_i,
            Category::J => n_j,
            Category::Param => 1,
        };
        let mut ncol = v.dim;
        if rng.below(10) == 0 {
            nrow = rng.below(3);
        }
        if rng.below(10) == 0 {
            ncol = rng.below(5);
        }
        if nrow.saturating_mul(ncol) > 1 << 16 {
            return None;
        }
        let data = (0..nrow * ncol).map(|_| rng.below(2001) as f64 / 100.0 - 10.0).collect();
        inputs.push((data, nrow, ncol));
    }
    if rng.below(20) == 0 {
        inputs.pop();
    }
    Some(inputs)
}

#[derive(Default)]
struct Counts {
    cases: usize,
    parsed: usize,
    ran: usize,
    errors: usize,
}

/// One case: a mutated formula and arguments, parsed and, where that works, run. Returns the first
/// failure found.
fn case(seed: u64, counts: &mut Counts) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let (formula, args) = SEEDS[rng.below(SEEDS.len())];
    let mut formula = formula.to_string();
    for _ in 0..1 + rng.below(2) {
        formula = mutate(&formula, &mut rng);
    }
    let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    if rng.below(4) == 0 {
        let i = rng.below(args.len());
        args[i] = mutate(&args[i], &mut rng);
    }
    let show = |what: &str| {
        let f: String = formula.chars().take(300).collect();
        format!("seed {seed}: {what}\n  formula ({} bytes): {f}\n  args: {args:?}", formula.len())
    };
    counts.cases += 1;
    if std::env::var("FUZZ_SHOW").is_ok() {
        println!("{}", show("case"));
    }
    let parsed = catch_unwind(AssertUnwindSafe(|| Operator::new(&formula, &args)))
        .map_err(|p| show(&format!("panic in the parser: {}", engine::error::panic_message(p.as_ref()))))?;
    let op = match parsed {
        Ok(op) => op,
        Err(e) if e.to_string().trim().is_empty() => return Err(show("an error without a message")),
        Err(_) => {
            counts.errors += 1;
            return Ok(());
        }
    };
    counts.parsed += 1;
    let Some(data) = inputs_for(&op, &mut rng) else { return Ok(()) };
    let inputs: Vec<Input> = data.iter().map(|(d, nrow, ncol)| Input::host(d, *nrow, *ncol)).collect();
    let precision = [Precision::F64, Precision::F32, Precision::F16][rng.below(3)];
    let options = RunOptions { precision, threads: 1 + rng.below(2), backend: Backend::Cpu, ..Default::default() };
    let ran = catch_unwind(AssertUnwindSafe(|| op.run(&inputs, &options)))
        .map_err(|p| show(&format!("panic in the evaluator: {}", engine::error::panic_message(p.as_ref()))))?;
    match ran {
        Ok(_) => counts.ran += 1,
        Err(e) if e.to_string().trim().is_empty() => return Err(show("an error without a message")),
        Err(_) => counts.errors += 1,
    }
    Ok(())
}

#[test]
fn mutated_formulas_end_in_an_operator_or_an_error() {
    // Panics are caught and reported as failures; the default hook would print each one first.
    std::panic::set_hook(Box::new(|_| {}));
    if let Some(seed) = std::env::var("FUZZ_SEED").ok().and_then(|s| s.parse().ok()) {
        let result = case(seed, &mut Counts::default());
        let _ = std::panic::take_hook();
        return result.unwrap();
    }
    let seconds = std::env::var("FUZZ_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(10.0);
    let budget = Duration::from_secs_f64(seconds);
    let start_seed: u64 = std::env::var("FUZZ_START").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let (clock, mut counts, mut failures) = (Instant::now(), Counts::default(), vec![]);
    let mut seed = start_seed;
    while clock.elapsed() < budget && failures.len() < 10 {
        let t = Instant::now();
        if let Err(failure) = case(seed, &mut counts) {
            failures.push(failure);
        }
        if t.elapsed() > Duration::from_secs(1) {
            println!("slow case: seed {seed}, {:.1} s", t.elapsed().as_secs_f64());
        }
        seed += 1;
    }
    let _ = std::panic::take_hook();
    println!(
        "fuzz: {} cases (seeds {start_seed}..{seed}) in {:.1} s: {} parsed, {} ran, {} informative errors, {} failures",
        counts.cases,
        clock.elapsed().as_secs_f64(),
        counts.parsed,
        counts.ran,
        counts.errors,
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(counts.cases >= 100, "only {} cases in {seconds} s", counts.cases);
}

#[test]
fn the_seeds_are_valid() {
    let errors: Vec<String> = SEEDS
        .iter()
        .filter_map(|(formula, args)| {
            let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            Operator::new(formula, &args).err().map(|e| format!("{formula}: {e}"))
        })
        .collect();
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}
