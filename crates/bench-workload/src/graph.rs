//! Agent graphs: a session whose turns fork subagents and join their answers.
//!
//! A session is a set of conversations (branches): the main one (`main`, the session's
//! `turns`) and each subagent's. A branch's turns run in order; a subagent's first turn waits
//! for the node it forks from; a turn's `after` adds joins. Nodes are numbered across the
//! session: the main turns first (`0..n`, so a linear session's numbers are its turn indices),
//! then each subagent's turns in the order the subagents are listed. Records name a node by
//! that number (`turn_index`) and its branch.

use std::collections::HashMap;

use crate::format::{MAIN_AGENT, NodeRef, TraceSession};

/// One branch of a resolved graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Branch {
    /// The node it forks from (`None` for the main branch).
    pub fork: Option<u32>,
    /// 0 for the main branch, its parent's depth + 1 for a subagent.
    pub depth: u32,
    /// Its first node's number.
    pub first: u32,
    /// How many turns it holds.
    pub len: u32,
}

/// A session's graph with every reference resolved to node numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Branch 0 is `main`, then the subagents in order.
    pub branches: Vec<Branch>,
    /// Per node: the joins it waits for besides its branch predecessor (or fork node).
    pub joins: Vec<Vec<u32>>,
    /// Per node: its branch.
    pub branch_of: Vec<u32>,
    /// The nodes in an order where every node comes after all it waits for.
    pub order: Vec<u32>,
}

impl Resolved {
    /// Every node `n` waits for: its branch predecessor (or, first in a subagent, the node
    /// it forks from), then its joins.
    pub fn deps(&self, n: u32) -> impl Iterator<Item = u32> + '_ {
        let b = &self.branches[self.branch_of[n as usize] as usize];
        let pred = if n > b.first { Some(n - 1) } else { b.fork };
        pred.into_iter()
            .chain(self.joins[n as usize].iter().copied())
    }

    /// Node `n` as `agent:turn`.
    pub fn name(&self, rec: &TraceSession, n: u32) -> String {
        let b = self.branch_of[n as usize] as usize;
        let agent = if b == 0 {
            MAIN_AGENT
        } else {
            rec.subagents[b - 1].agent_id.as_str()
        };
        format!("{agent}:{}", n - self.branches[b].first)
    }
}

/// Checks a session's graph: subagent ids, every reference, cycles. The error names the
/// session and the node.
pub fn check(rec: &TraceSession) -> Result<(), String> {
    resolve(rec).map(|_| ())
}

/// Resolves a session's references to node numbers, refusing bad ids, dangling references,
/// references to other sessions, cycles and nodes that can never be sent.
pub fn resolve(rec: &TraceSession) -> Result<Resolved, String> {
    let sid = rec.session_id.as_str();
    let mut index: HashMap<&str, usize> = HashMap::new();
    index.insert(MAIN_AGENT, 0);
    for (k, a) in rec.subagents.iter().enumerate() {
        let at = format!("session {sid:?}: subagents[{k}].agent_id");
        if a.agent_id.is_empty() || a.agent_id.contains(':') || a.agent_id.contains('/') {
            return Err(format!(
                "{at}: {:?} must be non-empty, without ':' or '/'",
                a.agent_id
            ));
        }
        if a.agent_id == MAIN_AGENT {
            return Err(format!("{at}: \"main\" names the session's own turns"));
        }
        if let Some(prev) = index.insert(&a.agent_id, k + 1) {
            return Err(format!(
                "{at}: {:?} is used twice (first at subagents[{}])",
                a.agent_id,
                prev - 1
            ));
        }
        if a.turns.is_empty() {
            return Err(format!(
                "session {sid:?}: subagent {:?} has no turns",
                a.agent_id
            ));
        }
    }
    let lens: Vec<u32> = std::iter::once(rec.turns.len())
        .chain(rec.subagents.iter().map(|a| a.turns.len()))
        .map(|n| n as u32)
        .collect();
    let mut firsts = Vec::with_capacity(lens.len());
    let mut total = 0u32;
    for &n in &lens {
        firsts.push(total);
        total += n;
    }
    let node = |r: &str, at: &str| -> Result<u32, String> {
        let nr = NodeRef::parse(r, sid).map_err(|e| format!("session {sid:?}: {at}: {e}"))?;
        let Some(&b) = index.get(nr.agent.as_str()) else {
            return Err(format!(
                "session {sid:?}: {at}: {r:?} is a dangling reference (no agent {:?} in this session)",
                nr.agent
            ));
        };
        if nr.turn >= lens[b] {
            return Err(format!(
                "session {sid:?}: {at}: {r:?} is a dangling reference ({} has {} turns)",
                nr.agent, lens[b]
            ));
        }
        Ok(firsts[b] + nr.turn)
    };
    let mut branches = Vec::with_capacity(lens.len());
    branches.push(Branch {
        fork: None,
        depth: 0,
        first: 0,
        len: lens[0],
    });
    for (k, a) in rec.subagents.iter().enumerate() {
        let fork = node(&a.after, &format!("subagent {:?} after", a.agent_id))?;
        branches.push(Branch {
            fork: Some(fork),
            depth: 0,
            first: firsts[k + 1],
            len: lens[k + 1],
        });
    }
    let mut branch_of = Vec::with_capacity(total as usize);
    for (b, &n) in lens.iter().enumerate() {
        branch_of.extend(std::iter::repeat_n(b as u32, n as usize));
    }
    let mut joins = Vec::with_capacity(total as usize);
    let all_turns = rec.turns.iter().map(|t| (MAIN_AGENT, t)).chain(
        rec.subagents
            .iter()
            .flat_map(|a| a.turns.iter().map(move |t| (a.agent_id.as_str(), t))),
    );
    for (agent, t) in all_turns {
        let mut j = Vec::with_capacity(t.after.len());
        for r in &t.after {
            let n = node(r, &format!("node {agent}:{} after", t.index))?;
            if !j.contains(&n) {
                j.push(n);
            }
        }
        joins.push(j);
    }
    let mut g = Resolved {
        branches,
        joins,
        branch_of,
        order: Vec::with_capacity(total as usize),
    };
    // Kahn's order; what is left waits on a cycle.
    let mut waiting: Vec<u32> = (0..total).map(|n| g.deps(n).count() as u32).collect();
    let mut dependents: Vec<Vec<u32>> = vec![Vec::new(); total as usize];
    for n in 0..total {
        for d in g.deps(n) {
            dependents[d as usize].push(n);
        }
    }
    let mut ready: Vec<u32> = (0..total).filter(|&n| waiting[n as usize] == 0).collect();
    while let Some(n) = ready.pop() {
        g.order.push(n);
        for &m in &dependents[n as usize] {
            waiting[m as usize] -= 1;
            if waiting[m as usize] == 0 {
                ready.push(m);
            }
        }
    }
    if g.order.len() < total as usize {
        // Walk back from a node left over through deps left over until one repeats.
        let left = |n: u32| waiting[n as usize] > 0;
        let start = (0..total).find(|&n| left(n)).unwrap_or(0);
        let mut path = vec![start];
        let mut cur = start;
        loop {
            let Some(d) = g.deps(cur).find(|&d| left(d)) else {
                return Err(format!(
                    "session {sid:?}: node {} is unreachable: it waits on a node that is never sent",
                    g.name(rec, start)
                ));
            };
            if let Some(p) = path.iter().position(|&x| x == d) {
                // Each node of `path` waits on the next; the last one on `path[p]`.
                let mut cyc: Vec<String> = path[p..].iter().map(|&x| g.name(rec, x)).collect();
                let first = cyc[0].clone();
                cyc.push(first.clone());
                return Err(format!(
                    "session {sid:?}: node {first} waits on itself (a cycle: {}, each waiting on the next)",
                    cyc.join(" → ")
                ));
            }
            path.push(d);
            cur = d;
        }
    }
    // Depths, in order (a fork node's branch is resolved before the branches it forks).
    for &n in &g.order.clone() {
        let b = g.branch_of[n as usize] as usize;
        if n == g.branches[b].first {
            if let Some(f) = g.branches[b].fork {
                g.branches[b].depth = g.branches[g.branch_of[f as usize] as usize].depth + 1;
            }
        }
    }
    Ok(g)
}

/// Cuts every branch to at most `max_turns` turns. A subagent whose fork node is gone is
/// dropped (and so are the ones it forked), and a join on a node that is gone is dropped from
/// the turn's `after`. Returns how many subagents were dropped.
pub fn cut(rec: &mut TraceSession, max_turns: usize) -> usize {
    rec.turns.truncate(max_turns);
    for a in &mut rec.subagents {
        a.turns.truncate(max_turns);
    }
    let sid = rec.session_id.clone();
    let mut dropped = 0;
    loop {
        let lens: HashMap<String, u32> =
            std::iter::once((MAIN_AGENT.to_string(), rec.turns.len() as u32))
                .chain(
                    rec.subagents
                        .iter()
                        .map(|a| (a.agent_id.clone(), a.turns.len() as u32)),
                )
                .collect();
        let alive = |r: &str| {
            NodeRef::parse(r, &sid)
                .ok()
                .is_some_and(|n| lens.get(&n.agent).is_some_and(|&l| n.turn < l))
        };
        let before = rec.subagents.len();
        rec.subagents.retain(|a| alive(&a.after));
        let gone = before - rec.subagents.len();
        dropped += gone;
        if gone == 0 {
            for t in rec
                .turns
                .iter_mut()
                .chain(rec.subagents.iter_mut().flat_map(|a| a.turns.iter_mut()))
            {
                t.after.retain(|r| alive(r));
            }
            return dropped;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::format::{Subagent, SubagentContext, TraceTurn};

    fn turns(n: u32) -> Vec<TraceTurn> {
        (0..n).map(|i| TraceTurn::new(i, vec![], "a")).collect()
    }

    fn sub(id: &str, after: &str, n: u32) -> Subagent {
        Subagent {
            agent_id: id.into(),
            after: after.into(),
            context: SubagentContext::Fork,
            subagent_type: None,
            system_prompt: None,
            turns: turns(n),
        }
    }

    fn fork_join() -> TraceSession {
        let mut main = turns(5);
        main[2].after = vec!["a:1".into(), "b:1".into(), "c:1".into()];
        TraceSession {
            session_id: "s".into(),
            source: None,
            system_prompt: None,
            turns: main,
            tools: None,
            subagents: vec![
                sub("a", "main:1", 2),
                sub("b", "main:1", 2),
                sub("c", "main:1", 2),
            ],
        }
    }

    #[test]
    fn a_fork_and_join_resolves_to_numbered_nodes() {
        let rec = fork_join();
        let g = resolve(&rec).unwrap();
        assert_eq!(g.branches.len(), 4);
        assert_eq!(
            g.branches[1],
            Branch {
                fork: Some(1),
                depth: 1,
                first: 5,
                len: 2
            }
        );
        assert_eq!(g.deps(2).collect::<Vec<_>>(), vec![1, 6, 8, 10]);
        assert_eq!(g.deps(5).collect::<Vec<_>>(), vec![1]);
        assert_eq!(g.deps(6).collect::<Vec<_>>(), vec![5]);
        assert_eq!(g.order.len(), 11);
        let pos = |n: u32| g.order.iter().position(|&x| x == n).unwrap();
        for n in 0..11 {
            for d in g.deps(n) {
                assert!(pos(d) < pos(n), "{d} before {n}");
            }
        }
        assert_eq!(g.name(&rec, 7), "b:0");
    }

    #[test]
    fn bad_graphs_are_refused_naming_session_and_node() {
        let mut r = fork_join();
        r.turns[2].after.push("zz:0".into());
        let e = check(&r).unwrap_err();
        assert!(
            e.contains("session \"s\"") && e.contains("main:2") && e.contains("dangling"),
            "{e}"
        );

        let mut r = fork_join();
        r.turns[2].after.push("a:7".into());
        assert!(check(&r).unwrap_err().contains("a has 2 turns"));

        let mut r = fork_join();
        r.turns[0].after.push("a:0".into());
        let e = check(&r).unwrap_err();
        assert!(
            e.contains("cycle") && e.contains("a:0") && e.contains("main:0"),
            "{e}"
        );

        let mut r = fork_join();
        r.turns[2].after.push("other/a:1".into());
        assert!(
            check(&r)
                .unwrap_err()
                .contains("another session (\"other\")")
        );
        let mut r = fork_join();
        r.turns[2].after.push("s/a:1".into());
        check(&r).unwrap();

        let mut r = fork_join();
        r.subagents[1].agent_id = "a".into();
        assert!(check(&r).unwrap_err().contains("used twice"));
        let mut r = fork_join();
        r.subagents[1].agent_id = "main".into();
        assert!(check(&r).is_err());
    }

    #[test]
    fn nested_subagents_have_depth() {
        let mut r = fork_join();
        r.subagents.push(sub("a1", "a:0", 1));
        let g = resolve(&r).unwrap();
        assert_eq!(g.branches[4].depth, 2);
    }

    #[test]
    fn cutting_drops_what_forks_or_joins_from_gone_nodes() {
        let mut r = fork_join();
        r.subagents.push(sub("late", "main:4", 1));
        r.subagents.push(sub("later", "late:0", 1));
        assert_eq!(cut(&mut r, 3), 2);
        assert_eq!(r.subagents.len(), 3);
        assert_eq!(r.turns[2].after.len(), 3);
        let mut r = fork_join();
        assert_eq!(cut(&mut r, 1), 3);
        assert!(r.subagents.is_empty());
        check(&r).unwrap();
        let mut r = fork_join();
        r.turns.truncate(5);
        cut(&mut r, 2);
        assert_eq!(r.subagents.len(), 3, "the forks of main:1 stay");
        assert!(r.subagents.iter().all(|a| a.turns.len() == 2));
    }
}
