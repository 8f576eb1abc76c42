package ephemeral

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of a typing frame (metric typing_frames_total).
const (
	OutcomeBroadcast   = "broadcast"    // notified to every gateway
	OutcomeRateLimited = "rate_limited" // within TypingInterval, or the send bucket empty: dropped
	OutcomeNotMember   = "not_member"   // refused
	OutcomeIgnored     = "ignored"      // a stop with no typing to stop
	OutcomeFailed      = "failed"       // PostgreSQL failed
)

type metrics struct {
	typing        *prometheus.CounterVec // typing frames by outcome
	delivered     *prometheus.CounterVec // frames handed to local sessions, by type
	dropped       *prometheus.CounterVec // frames a session did not take, by type
	transitions   *prometheus.CounterVec // presence published by this gateway, by to (online, offline)
	notifications *prometheus.CounterVec // ephemeral payloads by outcome (received, dropped)
	deliveryErrs  prometheus.Counter     // delivery queries that failed
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "inboxd", "gateway"
	m := &metrics{
		typing: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "typing_frames_total",
			Help: "Typing frames received from clients, by outcome (broadcast, rate_limited, not_member, ignored, failed)."}, []string{"outcome"}),
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "ephemeral_frames_delivered_total",
			Help: "Typing and presence frames queued to local WebSocket sessions, by type."}, []string{"type"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "ephemeral_frames_dropped_total",
			Help: "Typing and presence frames a local session did not take (before its welcome, or its queue full), by type."}, []string{"type"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "presence_transitions_total",
			Help: "Presence changes published by this gateway, by state (online, offline); offline includes the users of dead gateways it reaped."}, []string{"to"}),
		notifications: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "ephemeral_notifications_total",
			Help: "Tokens of the ephemeral NOTIFY channel heard, by outcome (received, dropped: the delivery queue was full)."}, []string{"outcome"}),
		deliveryErrs: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "ephemeral_delivery_errors_total",
			Help: "Delivery queries (members, conversation partners) that failed; their frames are lost."}),
	}
	var err error
	reuse := func(c prometheus.Collector) prometheus.Collector {
		if err != nil {
			return c
		}
		e := reg.Register(c)
		var are prometheus.AlreadyRegisteredError
		switch {
		case e == nil:
			return c
		case errors.As(e, &are):
			return are.ExistingCollector
		default:
			err = e
			return c
		}
	}
	m.typing = reuse(m.typing).(*prometheus.CounterVec)
	m.delivered = reuse(m.delivered).(*prometheus.CounterVec)
	m.dropped = reuse(m.dropped).(*prometheus.CounterVec)
	m.transitions = reuse(m.transitions).(*prometheus.CounterVec)
	m.notifications = reuse(m.notifications).(*prometheus.CounterVec)
	m.deliveryErrs = reuse(m.deliveryErrs).(prometheus.Counter)
	return m, err
}
