//! memgov-symcc: symbolic checks of a Cedar policy pack for `memgov policy prove` and
//! `memgov policy diff --semantic`.
//!
//! One JSON job on stdin, one JSON answer on stdout. Every check runs once per request
//! environment of the schema (one per action) whose action is named, or lies in a named action
//! group. A failed check carries a concrete counterexample: the Cedar request and entities
//! the solver found. The solver is cvc5, found through $CVC5 or `cvc5` on PATH.
//!
//! Kinds:
//! - `implies`: every request `lhs` allows, `rhs` allows too (counterexample: allowed by `lhs`
//!   only);
//! - `equivalent`: `lhs` and `rhs` decide every request alike (counterexample: a request they
//!   decide differently);
//! - `never_errors`: no policy of `lhs` errors on a well-formed request (one result per policy).

use std::io::Read;
use std::process::ExitCode;
use std::str::FromStr;

use cedar_policy::{Entities, EntityUid, PolicySet, RequestEnv, Schema};
use cedar_policy_symcc::solver::LocalSolver;
use cedar_policy_symcc::{CedarSymCompiler, CompiledPolicy, CompiledPolicySet, Env};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

#[derive(Deserialize)]
struct Job {
    schema: String,
    checks: Vec<Check>,
}

#[derive(Deserialize)]
struct Check {
    name: String,
    kind: String,
    /// Action ids or action group ids; empty means every action of the schema.
    #[serde(default)]
    actions: Vec<String>,
    lhs: String,
    #[serde(default)]
    rhs: String,
}

#[derive(Serialize)]
struct Outcome {
    name: String,
    action: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<String>,
    verdict: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    counterexample: Option<Value>,
}

type Failure = String;

fn parse_policies(text: &str, what: &str) -> Result<PolicySet, Failure> {
    PolicySet::from_str(text).map_err(|e| format!("{what}: {e}"))
}

fn applies(env: &RequestEnv, wanted: &[String], groups: &Entities) -> bool {
    if wanted.is_empty() {
        return true;
    }
    let action = env.action();
    let id = action.id().unescaped().to_string();
    if wanted.iter().any(|w| *w == id) {
        return true;
    }
    groups.ancestors(action).is_some_and(|mut parents| {
        parents.any(|p| {
            let pid = p.id().unescaped().to_string();
            wanted.iter().any(|w| *w == pid)
        })
    })
}

fn uid_json(uid: Option<&EntityUid>) -> Result<Value, Failure> {
    match uid {
        Some(u) => u.to_json_value().map_err(|e| e.to_string()),
        None => Ok(Value::Null),
    }
}

fn render(env: &Env) -> Result<Value, Failure> {
    let req = &env.request;
    let context = match req.context() {
        Some(c) => c.to_json_value().map_err(|e| e.to_string())?,
        None => Value::Null,
    };
    Ok(json!({
        "request": {
            "principal": uid_json(req.principal())?,
            "action": uid_json(req.action())?,
            "resource": uid_json(req.resource())?,
            "context": context,
        },
        "entities": env.entities.to_json_value().map_err(|e| e.to_string())?,
    }))
}

fn outcome(
    name: &str,
    env: &RequestEnv,
    policy: Option<String>,
    found: Option<Env>,
) -> Result<Outcome, Failure> {
    let counterexample = found.as_ref().map(render).transpose()?;
    Ok(Outcome {
        name: name.to_string(),
        action: env.action().id().unescaped().to_string(),
        policy,
        verdict: if counterexample.is_some() {
            "fails"
        } else {
            "proved"
        },
        counterexample,
    })
}

async fn run(job: Job) -> Result<Vec<Outcome>, Failure> {
    let (schema, _warnings) =
        Schema::from_cedarschema_str(&job.schema).map_err(|e| format!("schema: {e}"))?;
    let groups = schema
        .action_entities()
        .map_err(|e| format!("schema: {e}"))?;
    let solver = LocalSolver::cvc5().map_err(|e| format!("solver: cannot start cvc5: {e}"))?;
    let mut symcc = CedarSymCompiler::new(solver).map_err(|e| format!("solver: {e}"))?;
    let envs: Vec<RequestEnv> = schema.request_envs().collect();
    let mut out = Vec::new();
    for check in &job.checks {
        let lhs = parse_policies(&check.lhs, &format!("{}: lhs", check.name))?;
        let rhs = match check.kind.as_str() {
            "implies" | "equivalent" => {
                Some(parse_policies(&check.rhs, &format!("{}: rhs", check.name))?)
            }
            "never_errors" => None,
            other => return Err(format!("{}: unknown kind {other}", check.name)),
        };
        for env in envs.iter().filter(|e| applies(e, &check.actions, &groups)) {
            let where_ = format!("{} ({})", check.name, env.action());
            if let Some(rhs) = &rhs {
                let a = CompiledPolicySet::compile(&lhs, env, &schema)
                    .map_err(|e| format!("{where_}: {e}"))?;
                let b = CompiledPolicySet::compile(rhs, env, &schema)
                    .map_err(|e| format!("{where_}: {e}"))?;
                let found = if check.kind == "implies" {
                    symcc.check_implies_with_counterexample_opt(&a, &b).await
                } else {
                    symcc.check_equivalent_with_counterexample_opt(&a, &b).await
                }
                .map_err(|e| format!("{where_}: {e}"))?;
                out.push(outcome(&check.name, env, None, found)?);
                continue;
            }
            for policy in lhs.policies() {
                let id = policy
                    .annotation("id")
                    .map_or_else(|| policy.id().to_string(), str::to_string);
                let compiled = CompiledPolicy::compile(policy, env, &schema)
                    .map_err(|e| format!("{where_} {id}: {e}"))?;
                let found = symcc
                    .check_never_errors_with_counterexample_opt(&compiled)
                    .await
                    .map_err(|e| format!("{where_} {id}: {e}"))?;
                out.push(outcome(&check.name, env, Some(id), found)?);
            }
        }
    }
    Ok(out)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut text = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut text) {
        println!("{}", json!({"error": format!("stdin: {e}")}));
        return ExitCode::from(2);
    }
    let job: Job = match serde_json::from_str(&text) {
        Ok(j) => j,
        Err(e) => {
            println!("{}", json!({"error": format!("job: {e}")}));
            return ExitCode::from(2);
        }
    };
    match run(job).await {
        Ok(results) => {
            println!("{}", json!({ "results": results }));
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("{}", json!({ "error": e }));
            ExitCode::from(2)
        }
    }
}
