// trace_config.go owns what turns tracing on: serve's trace flags, the
// OpenTelemetry variables they win over (OTEL_SDK_DISABLED,
// OTEL_EXPORTER_OTLP_*, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_TRACES_SAMPLER*, OTEL_BSP_*), what a mistake in them says, and the
// tracer they make.

package main

import (
	"cmp"
	"flag"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// traceConfig is serve's tracing: the flags as given, then what resolve
// made of them and of the variables. url empty: tracing off.
type traceConfig struct {
	endpoint, headers, protocol string // --otlp-endpoint, --otlp-headers, --otlp-protocol
	service, resource           string // --otel-service-name, --otel-resource-attributes
	samplerName, samplerArg     string // --trace-sampler, --trace-sampler-arg
	disabled                    bool   // --otel-sdk-disabled

	url       string // where the spans go
	headerMap http.Header
	attrs     []attr // the resource's
	sampler   sampler
	queueSize int
	batchSize int
	delay     time.Duration
	timeout   time.Duration
}

// flags registers serve's trace flags on fs.
func (c *traceConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.endpoint, "otlp-endpoint", "", "the OTLP/HTTP `URL` the spans are sent to, as is (http://collector:4318/v1/traces); empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces; none of them: no tracing")
	fs.StringVar(&c.headers, "otlp-headers", "", "headers sent to the collector, a `LIST` of name=value separated by commas (values percent-encoded); empty: OTEL_EXPORTER_OTLP_HEADERS")
	fs.StringVar(&c.protocol, "otlp-protocol", "", "the OTLP `PROTOCOL`: only http/protobuf; empty: OTEL_EXPORTER_OTLP_PROTOCOL")
	fs.StringVar(&c.service, "otel-service-name", "", "the service.name of the spans, a `NAME`; empty: OTEL_SERVICE_NAME, else petstore")
	fs.StringVar(&c.resource, "otel-resource-attributes", "", "more attributes of the spans' resource, a `LIST` of key=value separated by commas; empty: OTEL_RESOURCE_ATTRIBUTES")
	fs.StringVar(&c.samplerName, "trace-sampler", "", "which traces are recorded, a `SAMPLER`: always_on, always_off, traceidratio, or parentbased_ with one of them; empty: OTEL_TRACES_SAMPLER, else parentbased_always_on")
	fs.StringVar(&c.samplerArg, "trace-sampler-arg", "", "the traceidratio samplers' ratio, a `NUMBER` from 0 to 1; empty: OTEL_TRACES_SAMPLER_ARG, else 1")
	fs.BoolVar(&c.disabled, "otel-sdk-disabled", false, "no tracing, whatever else is set; else OTEL_SDK_DISABLED")
}

// pick returns the flag's value (with its label) when set, else the first
// variable of names that getenv finds set.
func pick(flagVal, flagName string, getenv func(string) string, names ...string) (v, label string) {
	if flagVal != "" {
		return flagVal, "--" + flagName
	}
	for _, n := range names {
		if v := strings.TrimSpace(getenv(n)); v != "" {
			return v, n
		}
	}
	return "", ""
}

// resolve reads the OpenTelemetry variables under the flags, and checks
// both. Nothing naming a collector leaves tracing off (url empty).
func (c *traceConfig) resolve(getenv func(string) string) error {
	if c.disabled || strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return nil
	}
	if p, label := pick(c.protocol, "otlp-protocol", getenv, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"); p != "" && p != "http/protobuf" {
		return usagef("%s is %q: petstore exports traces over http/protobuf only", label, p)
	}
	ep, label := pick(c.endpoint, "otlp-endpoint", getenv, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if ep == "" {
		if base := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")); base != "" {
			ep, label = strings.TrimRight(base, "/")+"/v1/traces", "OTEL_EXPORTER_OTLP_ENDPOINT"
		}
	}
	if ep == "" {
		return nil
	}
	if u, err := url.Parse(ep); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("%s must be an http or https URL, got %q", label, redactDB(ep))
	}
	c.url = ep
	var err error
	h, label := pick(c.headers, "otlp-headers", getenv, "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")
	c.headerMap = http.Header{}
	pairs, err := parsePairs(h, label)
	if err != nil {
		return err
	}
	for _, kv := range pairs {
		c.headerMap.Add(kv[0], kv[1])
	}
	if c.sampler, err = c.parseSampler(getenv); err != nil {
		return err
	}
	res, label := pick(c.resource, "otel-resource-attributes", getenv, "OTEL_RESOURCE_ATTRIBUTES")
	pairs, err = parsePairs(res, label)
	if err != nil {
		return err
	}
	service, _ := pick(c.service, "otel-service-name", getenv, "OTEL_SERVICE_NAME")
	for _, kv := range pairs {
		if kv[0] == "service.name" {
			service = cmp.Or(service, kv[1])
			continue
		}
		c.attrs = append(c.attrs, attr{key: kv[0], s: kv[1]})
	}
	c.attrs = append([]attr{{key: "service.name", s: cmp.Or(service, "petstore")}, {key: "service.version", s: buildVersion()},
		{key: "telemetry.sdk.name", s: "petstore"}, {key: "telemetry.sdk.language", s: "go"}}, c.attrs...)
	ints := []struct {
		name     string
		dst      *int
		def, min int
	}{
		{"OTEL_BSP_MAX_QUEUE_SIZE", &c.queueSize, 2048, 1},
		{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", &c.batchSize, 512, 1},
	}
	for _, v := range ints {
		*v.dst = v.def
		if s := strings.TrimSpace(getenv(v.name)); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < v.min || n > 1<<20 {
				return usagef("%s must be a whole number from %d to %d, got %q", v.name, v.min, 1<<20, s)
			}
			*v.dst = n
		}
	}
	c.batchSize = min(c.batchSize, c.queueSize)
	for _, v := range []struct {
		name string
		dst  *time.Duration
		def  time.Duration
	}{
		{"OTEL_BSP_SCHEDULE_DELAY", &c.delay, 5 * time.Second},
		{"OTEL_EXPORTER_OTLP_TIMEOUT", &c.timeout, 10 * time.Second},
	} {
		*v.dst = v.def
		if s := strings.TrimSpace(getenv(v.name)); s != "" {
			ms, err := strconv.Atoi(s)
			if err != nil || ms < 1 || ms > 3_600_000 {
				return usagef("%s must be milliseconds from 1 to 3600000, got %q", v.name, s)
			}
			*v.dst = time.Duration(ms) * time.Millisecond
		}
	}
	return nil
}

// parsePairs reads a W3C Baggage-like list, key=value separated by commas,
// with percent-encoded values, as the OTLP headers and the resource
// attributes are written. Its error never shows a value: a header's may be
// a token.
func parsePairs(s, label string) ([][2]string, error) {
	var out [][2]string
	for item := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(item) == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		k = strings.TrimSpace(k)
		val, err := url.PathUnescape(strings.TrimSpace(v))
		if !ok || k == "" || err != nil || strings.ContainsAny(k, " \t\r\n") || strings.ContainsAny(val, "\r\n") {
			return nil, usagef("%s must be a list of key=value separated by commas (values percent-encoded); an entry is not (its key: %q)", label, clipField(k))
		}
		out = append(out, [2]string{k, val})
	}
	return out, nil
}

// samplers are OTEL_TRACES_SAMPLER's names petstore knows.
var samplers = []string{"always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"}

func (c *traceConfig) parseSampler(getenv func(string) string) (sampler, error) {
	name, label := pick(c.samplerName, "trace-sampler", getenv, "OTEL_TRACES_SAMPLER")
	if name == "" {
		name = "parentbased_always_on"
	}
	s := sampler{bound: 1 << 63}
	root, based := strings.CutPrefix(name, "parentbased_")
	s.parentBased = based
	switch root {
	case "always_on":
	case "always_off":
		s.bound = 0
	case "traceidratio":
		ratio := 1.0
		if arg, argLabel := pick(c.samplerArg, "trace-sampler-arg", getenv, "OTEL_TRACES_SAMPLER_ARG"); arg != "" {
			r, err := strconv.ParseFloat(arg, 64)
			if err != nil || !(r >= 0 && r <= 1) {
				return s, usagef("%s must be a ratio from 0 to 1, got %q", argLabel, arg)
			}
			ratio = r
		}
		s.bound = uint64(ratio * (1 << 63))
	default:
		return s, usagef("%s must be %s, got %q", label, orList(samplers), name)
	}
	return s, nil
}

// newTracer returns the tracer of c, or nil when tracing is off.
func newTracer(c traceConfig, log *slog.Logger) *tracer {
	if c.url == "" {
		return nil
	}
	return &tracer{sampler: c.sampler, exp: newExporter(c, newOTLPHead(c.attrs, "petstore", buildVersion()), log)}
}
