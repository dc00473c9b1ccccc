// rust_panic: `v[i]` out of bounds in main (a panic; built with
// panic = "abort", so the panic ends in abort(): SIGABRT / SI_TKILL). The
// index comes through black_box so the compiler cannot see the panic coming.
use std::hint::black_box;

fn main() {
    let v = vec![1, 2, 3];
    let i = black_box(8usize);
    println!("{}", v[i]); // CRASH-LINE
}
