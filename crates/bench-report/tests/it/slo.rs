//! `--slo` parsing.

use bench_report::{Slo, SloParseError};

#[test]
fn parses() {
    let s: Slo = "ttft_ms=500,tpot_ms=50".parse().unwrap();
    assert_eq!(
        s,
        Slo {
            ttft_ms: Some(500.0),
            tpot_ms: Some(50.0),
            e2e_ms: None
        }
    );
    let s: Slo = " e2e_ms = 2.5e3 ".parse().unwrap();
    assert_eq!(s.e2e_ms, Some(2500.0));
    assert_eq!(s.to_string(), "e2e_ms=2500");
    let round: Slo = "ttft_ms=500,tpot_ms=50"
        .parse::<Slo>()
        .unwrap()
        .to_string()
        .parse()
        .unwrap();
    assert_eq!(round.ttft_ms, Some(500.0));
}

#[test]
fn rejects_with_clear_errors() {
    let err = |s: &str| s.parse::<Slo>().unwrap_err();
    assert_eq!(
        err("ttfb_ms=5"),
        SloParseError::UnknownKey("ttfb_ms".into())
    );
    assert!(
        err("ttfb_ms=5")
            .to_string()
            .contains("known: ttft_ms, tpot_ms, e2e_ms")
    );
    assert!(matches!(
        err("ttft_ms=0"),
        SloParseError::NotPositive { .. }
    ));
    assert!(matches!(
        err("ttft_ms=-3"),
        SloParseError::NotPositive { .. }
    ));
    assert!(matches!(
        err("ttft_ms=inf"),
        SloParseError::NotPositive { .. }
    ));
    assert!(matches!(
        err("ttft_ms=fast"),
        SloParseError::NotANumber { .. }
    ));
    assert_eq!(err("ttft_ms"), SloParseError::NotKeyValue("ttft_ms".into()));
    assert_eq!(err(""), SloParseError::Empty);
    assert_eq!(
        err("ttft_ms=1,ttft_ms=2"),
        SloParseError::Duplicate("ttft_ms".into())
    );
    assert!(err("tpot_ms=-1").to_string().contains("positive"));
}

#[test]
fn session_slos_parse_and_refuse_bad_keys() {
    use bench_report::SessionSlo;
    let s: SessionSlo = "ttft_ms=2000, tpot_ms=50, session_s=600".parse().unwrap();
    assert_eq!(s.turn.ttft_ms, Some(2000.0));
    assert_eq!(s.turn.tpot_ms, Some(50.0));
    assert_eq!(s.session_s, Some(600.0));
    assert_eq!(s.to_string(), "ttft_ms=2000,tpot_ms=50,session_s=600");
    let only: SessionSlo = "session_s=90".parse().unwrap();
    assert_eq!(
        (only.turn, only.to_string()),
        (Slo::default(), "session_s=90".into())
    );
    let err = |t: &str| t.parse::<SessionSlo>().unwrap_err().to_string();
    assert_eq!(
        err("ttft_ms=1,session=5"),
        "unknown session SLO key `session` (known: ttft_ms, tpot_ms, e2e_ms per turn; session_s)"
    );
    assert_eq!(
        err("session_s=0"),
        "SLO `session_s`: must be a positive number of seconds, got `0`"
    );
    assert_eq!(
        err("session_s=1,session_s=2"),
        "SLO key `session_s` given twice"
    );
    assert!(err("").starts_with("empty SLO"));
}
