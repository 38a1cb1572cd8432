//! Round trip of the `.smelt` text format over random graphs: `parse(&print(&g)) == Ok(g)`.

use proptest::prelude::*;
use smelt_ir::arbitrary::{arb_graph, arb_graph_with, GenConfig};
use smelt_ir::text::{parse, print};
use smelt_ir::{verify, Graph};

proptest! {
    #![proptest_config(ProptestConfig { cases: smelt_ir::arbitrary::proptest_cases(1024), ..ProptestConfig::default() })]

    #[test]
    fn print_then_parse_is_identity(g in arb_graph(24)) {
        let text = print(&g);
        let back = parse(&text);
        prop_assert_eq!(back.as_ref(), Ok(&g), "text:\n{}", text);
        // Printing is deterministic and a fixed point.
        prop_assert_eq!(print(&back.unwrap()), text);
    }

    #[test]
    fn generated_graphs_verify_and_have_outputs(g in arb_graph(32)) {
        prop_assert!(verify(&g).is_ok(), "{:?}\n{}", verify(&g), g);
        prop_assert!(!g.outputs().is_empty());
        prop_assert!(g.len() <= 32);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: smelt_ir::arbitrary::proptest_cases(64), ..ProptestConfig::default() })]

    #[test]
    fn large_graphs_round_trip(g in arb_graph_with(GenConfig { max_nodes: 96, ..GenConfig::default() })) {
        prop_assert_eq!(parse(&print(&g)), Ok(g));
    }

    #[test]
    fn display_and_from_str_agree_with_print_and_parse(g in arb_graph(12)) {
        prop_assert_eq!(g.to_string(), print(&g));
        prop_assert_eq!(g.to_string().parse::<Graph>(), Ok(g));
    }
}
