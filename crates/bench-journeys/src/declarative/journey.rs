//! The Journey: [`FileJourney`] as a [`crate::Journey`].

use std::time::{Duration, Instant};

use crate::journey::{BoxFuture, Ctx, Env, Failure, Journey, Kind};

use super::run::{Lists, Scope, State, run_steps};
use super::steps::FileJourney;

fn state_of(ctx: &Ctx) -> Result<&State, Failure> {
    ctx.downcast_ref::<State>()
        .ok_or_else(|| Failure::other("the setup context is not a declarative journey's"))
}

impl Journey for FileJourney {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn kind(&self) -> Kind {
        self.kind
    }
    fn concurrency_safe(&self) -> bool {
        self.concurrency_safe
    }
    fn needs_mock_llm(&self) -> bool {
        self.needs_mock_llm
    }
    fn needs_runner(&self) -> bool {
        self.needs_runner
    }
    fn max_iterations(&self) -> Option<u32> {
        self.max_iterations
    }
    fn notes(&self, ctx: &Ctx) -> Vec<(String, String)> {
        let Ok(state) = state_of(ctx) else {
            return Vec::new();
        };
        self.report
            .iter()
            .filter_map(|n| Some((n.clone(), state.vars.get(n)?.clone())))
            .collect()
    }

    fn setup<'a>(&'a self, env: &'a Env) -> BoxFuture<'a, Result<Ctx, Failure>> {
        Box::pin(async move {
            let common = &*self.common;
            common.check_params()?;
            let lists = Lists::default();
            let local = {
                let mut scope = Scope::new(&common.params, &lists);
                run_steps(env, common, &common.setup, &mut scope, false).await?;
                run_steps(env, common, &self.setup, &mut scope, false).await?;
                std::mem::take(&mut scope.local)
            };
            let mut vars = common.params.clone();
            vars.extend(local);
            Ok(Box::new(State { vars, lists }) as Ctx)
        })
    }

    fn measure<'a>(
        &'a self,
        env: &'a Env,
        ctx: &'a Ctx,
    ) -> BoxFuture<'a, Result<Option<Duration>, Failure>> {
        Box::pin(async move {
            let state = state_of(ctx)?;
            let mut scope = Scope::new(&state.vars, &state.lists);
            let t0 = Instant::now();
            run_steps(env, &self.common, &self.measure, &mut scope, false).await?;
            if !self.clocked {
                return Ok(None);
            }
            let end = Instant::now();
            let start = scope.clock_start.unwrap_or(t0);
            let stop = scope.clock_stop.unwrap_or(end);
            Ok(Some(stop.saturating_duration_since(start)))
        })
    }

    fn teardown<'a>(&'a self, env: &'a Env, ctx: Ctx) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let Ok(state) = state_of(&ctx) else {
                return;
            };
            let mut scope = Scope::new(&state.vars, &state.lists);
            let _ = run_steps(env, &self.common, &self.teardown, &mut scope, true).await;
        })
    }
}
