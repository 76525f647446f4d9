use super::*;
use crate::graph::testutil::{brute_force, clustered, recall};

fn built(n: usize, dim: usize, ratio: f64) -> (Vec<f32>, EntranceGraph) {
    let data = clustered(n, dim, 8, 11);
    let params = EntranceParams {
        ratio,
        ..EntranceParams::default()
    };
    let g = EntranceGraph::build(&data, dim, Metric::L2, &params, &BuildControl::none()).unwrap();
    (data, g)
}

#[test]
fn sample_size_and_ids() {
    assert_eq!(sample_size(100_000, 0.01, 1), 1000);
    assert_eq!(sample_size(150, 0.01, 1), 2);
    assert_eq!(sample_size(5, 0.01, 10), 5);
    assert_eq!(sample_size(0, 0.01, 1), 0);
    let a = sample_ids(1000, 0.05, 1, 3);
    assert_eq!(a.len(), 50);
    assert!(a.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(a, sample_ids(1000, 0.05, 1, 3));
    assert_ne!(a, sample_ids(1000, 0.05, 1, 4));
}

#[test]
fn search_returns_sampled_ids_close_to_the_query() {
    let (data, g) = built(20_000, 16, 0.05);
    assert_eq!(g.len(), 1000);
    assert!(g.adjacency.iter().all(|l| l.len() <= DEFAULT_DEGREE));
    // Compare with brute force over the sample itself.
    let sample: Vec<f32> = g
        .ids()
        .iter()
        .flat_map(|&v| g.vector(v).unwrap().to_vec())
        .collect();
    let mut total = 0.0;
    for q in data.chunks_exact(16).step_by(400) {
        let (entry, explored) = g.search(q, DEFAULT_SEARCH_LIST).unwrap();
        assert_eq!(entry.len(), DEFAULT_SEARCH_LIST);
        assert!(
            entry.iter().all(|&v| g.contains(v)),
            "entry points are global sample ids"
        );
        assert!(explored.iter().all(|&(v, _)| g.contains(v)));
        assert!(
            explored.windows(2).all(|w| w[0].1 <= w[1].1),
            "explored sorted by distance"
        );
        let truth: Vec<VertexId> = brute_force(&sample, 16, Metric::L2, q, 10)
            .into_iter()
            .map(|l| g.ids()[l as usize])
            .collect();
        total += recall(&entry, &truth);
    }
    let r = total / 50.0;
    assert!(r >= 0.9, "entrance search recall@10 over the sample is {r}");
    assert!(g.search(&[0.0; 3], 10).is_err());
}

#[test]
fn search_live_skips_deleted_entry_points() {
    let (data, g) = built(2000, 8, 0.1);
    let q = &data[..8];
    let (all, _) = g.search(q, 10).unwrap();
    let dead = all[0];
    let (live, _) = g.search_live(q, 10, |v| v != dead).unwrap();
    assert!(!live.contains(&dead));
    assert_eq!(live, all[1..].to_vec());
    // With every nearby member deleted, they still route: all are returned.
    let (none_live, _) = g.search_live(q, 10, |_| false).unwrap();
    assert_eq!(none_live, all);
    let ((counted, explored), distances) = g.search_live_counted(q, 10, |_| true).unwrap();
    assert_eq!(counted, all);
    // Every expanded vertex was scored, and so were neighbours never expanded.
    assert!(
        distances > explored.len(),
        "{distances} vs {}",
        explored.len()
    );
    assert!(distances <= g.len());
}

#[test]
fn promotion_prioritises_e_inter_and_keeps_the_degree_bound() {
    let (data, mut g) = built(5000, 8, 0.02);
    let before = g.len();
    let dim = 8;
    // Promote 300 non-members, with their own entrance search as E_ent and a made-up
    // on-disk explored set holding one far-away member.
    let outsiders: Vec<VertexId> = (0..5000u32)
        .filter(|v| !g.contains(*v))
        .step_by(15)
        .take(300)
        .collect();
    let mut promoted = 0;
    for v in outsiders {
        let vec = &data[v as usize * dim..(v as usize + 1) * dim];
        let (_, explored) = g.search(vec, 10).unwrap();
        let e_ent: Vec<VertexId> = explored.iter().map(|e| e.0).collect();
        let far_member = *g.ids().last().unwrap();
        // `v` itself is not a member yet, so E_inter is exactly {far_member}.
        let e_pos = vec![v, far_member];
        let plan = g.plan_promotion(v, vec, &e_ent, &e_pos).unwrap();
        let nbrs = plan.neighbors(&g);
        // E_inter (only `far_member`) comes first even though it is far away.
        assert_eq!(nbrs[0], far_member);
        assert!(nbrs.len() <= DEFAULT_DEGREE);
        g.apply_promotion(plan).unwrap();
        promoted += 1;
        assert!(g.contains(v));
        assert_eq!(g.neighbors(v).unwrap(), nbrs);
        for &p in &nbrs {
            assert!(g.neighbors(p).unwrap().len() <= DEFAULT_DEGREE);
        }
    }
    assert_eq!(g.len(), before + promoted);
    assert!(
        g.adjacency.iter().all(|l| l.len() <= DEFAULT_DEGREE),
        "degree bound after promotions"
    );
    // Back edges make promoted vertices findable: search for each finds it first.
    let mut found = 0;
    for &v in &g.ids()[before..] {
        let (entry, _) = g.search(g.vector(v).unwrap(), 10).unwrap();
        found += usize::from(entry.first() == Some(&v));
    }
    assert!(
        found * 10 >= promoted * 9,
        "{found} of {promoted} promoted vertices found"
    );
    // Errors: member again, wrong dimension.
    let member = g.ids()[0];
    assert!(g.promote(member, &data[..dim], &[], &[]).is_err());
    assert!(g.promote(999_999, &[1.0], &[], &[]).is_err());
}

#[test]
fn promotion_into_an_empty_graph_and_stale_plans() {
    let empty = EntranceGraph::build(
        &[],
        4,
        Metric::L2,
        &EntranceParams::default(),
        &BuildControl::none(),
    )
    .unwrap();
    let mut g = empty.clone();
    assert!(g.is_empty());
    assert_eq!(g.search(&[0.0; 4], 10).unwrap(), (vec![], vec![]));
    g.promote(7, &[1.0, 0.0, 0.0, 0.0], &[], &[]).unwrap();
    g.promote(9, &[0.0, 1.0, 0.0, 0.0], &[7], &[]).unwrap();
    assert_eq!(g.neighbors(9).unwrap(), vec![7]);
    assert_eq!(g.neighbors(7).unwrap(), vec![9]);
    assert_eq!(g.search(&[0.9, 0.1, 0.0, 0.0], 10).unwrap().0, vec![7, 9]);
    // A plan made on one graph cannot be applied to a smaller one.
    let plan = g
        .plan_promotion(11, &[0.0, 0.0, 1.0, 0.0], &[9], &[])
        .unwrap();
    let mut other = empty;
    assert!(other.apply_promotion(plan).is_err());
    assert!(g.should_promote(300));
    assert!(!g.should_promote(200));
}

#[test]
fn bytes_round_trip_and_corruption_is_rejected() {
    let (_, mut g) = built(3000, 6, 0.02);
    g.promote(123_456, &[0.5; 6], &[g.ids()[0]], &[]).unwrap();
    let bytes = g.to_bytes();
    let back = EntranceGraph::from_bytes(&bytes).unwrap();
    assert_eq!(back, g);
    assert_eq!(back.to_bytes(), bytes);

    assert!(EntranceGraph::from_bytes(&bytes[..bytes.len() - 1]).is_err());
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(EntranceGraph::from_bytes(&longer).is_err());
    let mut bad = bytes.clone();
    bad[0] = b'X';
    assert!(matches!(
        EntranceGraph::from_bytes(&bad),
        Err(EntranceError::Format(_))
    ));
    let mut bad = bytes.clone();
    bad[8] = 2; // version
    assert!(EntranceGraph::from_bytes(&bad).is_err());
    let mut bad = bytes.clone();
    bad[20..24].copy_from_slice(&u32::MAX.to_le_bytes()); // absurd count
    assert!(EntranceGraph::from_bytes(&bad).is_err());
    // A neighbour id out of range in the first list.
    let lists_at = HEADER_SIZE + g.len() * 4 * (1 + 6);
    let mut bad = bytes.clone();
    bad[lists_at + 4..lists_at + 8].copy_from_slice(&(g.len() as u32).to_le_bytes());
    assert!(EntranceGraph::from_bytes(&bad).is_err());
    assert!(EntranceGraph::from_bytes(&[]).is_err());
}
