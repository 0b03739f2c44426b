//! Prints how much of the default scenario the fast path plays (segments: ops, repeat).
fn main() {
    let (s, p) = decodesim::sim::ScenarioRequest::default().load().unwrap();
    let d = decodesim::whatif::draft::Draft::load(
        decodesim::whatif::draft::Method::Eagle3,
        None,
        &s.model,
    )
    .unwrap();
    let f = decodesim::sim::fast::FastScenario::new(&s, &p, Some(&d)).unwrap();
    println!("{:?}", f.shapes());
}
