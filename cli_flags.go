// cli_flags.go owns how every command reads its flags: parsing with
// PETSTORE_* defaults, the bounds of numeric flags, what a mistake in a
// flag says, and the help that a command's -h prints.

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// flagBound is the range of a numeric flag's values: min, and max unless
// it is 0. A duration flag's are nanoseconds.
type flagBound struct{ min, max int64 }

// flagBounds are the bounds of the flags that have them, by name, in
// every command: parseFlags refuses a value given outside them, and -h
// shows them. A flag missing here has no bounds; a rule that joins two
// flags is its command's (serveConfig.validate).
var flagBounds = map[string]flagBound{
	"anon-rpm":                {min: 1, max: limMaxRPM},
	"max-addrs":               {min: 1},
	"ban-threshold":           {min: 1},
	"ban-duration":            {min: int64(time.Second)},
	"ban-hold":                {min: 0, max: int64(maxBanHold)},
	"db-max-conns":            {min: 1},
	"replica-wait":            {min: 0, max: int64(10 * time.Second)},
	"replica-max-lag":         {min: int64(time.Millisecond)},
	"max-conns-per-addr":      {min: 0},
	"max-conns":               {min: 1},
	"admin-max-conns":         {min: 1},
	"memory-release-interval": {min: int64(100 * time.Millisecond)},
	"busy-timeout":            {min: int64(time.Millisecond)},
	"redis-timeout":           {min: int64(time.Millisecond)},
	"idempotency-ttl":         {min: int64(time.Minute)},
	"shutdown-timeout":        {min: 0},
	"read-header-timeout":     {min: int64(time.Millisecond)},
	"read-timeout":            {min: int64(time.Millisecond)},
	"write-timeout":           {min: int64(time.Millisecond)},
	"idle-timeout":            {min: int64(time.Millisecond)},
	"rpm":                     {min: 1, max: limMaxRPM},
	"rpd":                     {min: 1},
	"overlap":                 {min: 0},
}

// text is the bound as -h writes it, after "must be" or alone.
func (b flagBound) text(f *flag.Flag) string {
	switch {
	case b.max != 0:
		return flagNumber(f, b.min) + " to " + flagNumber(f, b.max)
	case b.min == 0:
		return "not negative"
	}
	return "at least " + flagNumber(f, b.min)
}

// check returns the usage error of f's value outside b, or nil; label
// is where the value came from (--ban-hold, or PETSTORE_BAN_HOLD).
func (b flagBound) check(f *flag.Flag, label string) error {
	v, ok := flagInt(f)
	if !ok || v >= b.min && (b.max == 0 || v <= b.max) {
		return nil
	}
	if b.max == 0 && b.min == 0 {
		return usagef("%s must not be negative, got %s", label, flagNumber(f, v))
	}
	return usagef("%s must be %s, got %s", label, b.text(f), flagNumber(f, v))
}

// flagInt is the value of a numeric flag as an int64 (a duration's in
// nanoseconds); ok is false for a flag of another kind.
func flagInt(f *flag.Flag) (v int64, ok bool) {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return 0, false
	}
	switch x := g.Get().(type) {
	case int:
		return int64(x), true
	case int64:
		return x, true
	case uint:
		return int64(min(uint64(x), math.MaxInt64)), true
	case uint64:
		return int64(min(x, math.MaxInt64)), true
	case time.Duration:
		return int64(x), true
	}
	return 0, false
}

// flagNumber writes n as f's values are written: a duration as the docs
// write one (fmtDuration), anything else in decimal.
func flagNumber(f *flag.Flag, n int64) string {
	if isDurationFlag(f) {
		return fmtDuration(time.Duration(n))
	}
	return strconv.FormatInt(n, 10)
}

func isDurationFlag(f *flag.Flag) bool {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return false
	}
	_, ok = g.Get().(time.Duration)
	return ok
}

// fmtDuration writes d as the docs write durations: 24h, 15m, 1h30m and
// 1m30s, not time.Duration's 24h0m0s, 15m0s and 1h30m0s.
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// formed is a flag.Value that says what form its values take, for the
// message of a value it refuses: "a log level (debug, ...)".
type formed interface{ form() string }

var (
	_ formed = (*dateFlag)(nil)
	_ formed = levelFlag{}
)

// checkedValue wraps a flag's Value and keeps what its last refused Set
// was given, so that a refused value gets a message of its own rather than
// the flag package's ("invalid value ... for flag -x: parse error").
type checkedValue struct {
	flag.Value
	name    string
	refused *refusedValue
}

// refusedValue is a value that a flag's Set refused, and why.
type refusedValue struct {
	name, value string
	err         error
}

func (v checkedValue) Set(s string) error {
	err := v.Value.Set(s)
	if err != nil {
		*v.refused = refusedValue{v.name, s, err}
	}
	return err
}

func (v checkedValue) Get() any {
	if g, ok := v.Value.(flag.Getter); ok {
		return g.Get()
	}
	return nil
}

func (v checkedValue) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// badValue is the message of value, refused by flag f, given as label
// (--ban-duration, or PETSTORE_BAN_DURATION): the form it wants.
func badValue(label, value string, f *flag.Flag, err error) error {
	inner := f.Value
	if c, ok := inner.(checkedValue); ok {
		inner = c.Value
	}
	if fv, ok := inner.(formed); ok {
		return usagef("%s: %q is not %s", label, value, fv.form())
	}
	if err != nil && strings.Contains(err.Error(), "out of range") {
		return usagef("%s: %q is out of range", label, value)
	}
	var form string
	if g, ok := f.Value.(flag.Getter); ok {
		switch g.Get().(type) {
		case time.Duration:
			form = "a duration (like 15m or 1h)"
		case bool:
			form = "true or false"
		case int, int64, uint, uint64:
			form = "an integer"
		case float64:
			form = "a number"
		}
	}
	if form == "" {
		return usagef("%s: %q: %v", label, value, err)
	}
	return usagef("%s: %q is not %s", label, value, form)
}

// dateFlag is a flag.Value for a time given as YYYY-MM-DD (00:00 UTC) or
// as an RFC 3339 timestamp.
type dateFlag time.Time

// String writes a time at 00:00 UTC as its date, as the docs write it.
func (d *dateFlag) String() string {
	t := time.Time(*d).UTC()
	if t.Equal(t.Truncate(24 * time.Hour)) {
		return t.Format(time.DateOnly)
	}
	return t.Format(time.RFC3339)
}

func (d *dateFlag) Set(s string) error {
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		t, err = time.Parse(time.RFC3339, s)
	}
	if err != nil {
		return errors.New("not a date")
	}
	*d = dateFlag(t.UTC())
	return nil
}

func (d *dateFlag) form() string {
	return "a date (like 2027-07-01) or an RFC 3339 time (like 2027-07-01T09:00:00Z)"
}

// envName is the variable that flag name is read from.
func envName(name string) string {
	return "PETSTORE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// parseFlags parses args into fs, allowing flags after positional
// arguments, fills every flag not given from its PETSTORE_ variable, and
// checks the values given against flagBounds. It returns the positional
// arguments, which must number nargs. A mistake is a usageError naming
// the flag as the help writes it (--name); run puts the command before it.
func parseFlags(fs *flag.FlagSet, args []string, getenv func(string) string, stdout io.Writer, nargs int) ([]string, error) {
	refused := &refusedValue{}
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := f.Value.(checkedValue); !ok {
			f.Value = checkedValue{f.Value, f.Name, refused}
		}
	})
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				printHelp(fs, stdout)
				return nil, errHelp
			}
			return nil, parseError(fs, err, refused)
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	given := map[string]string{} // where each flag given came from
	fs.Visit(func(f *flag.Flag) { given[f.Name] = "--" + f.Name })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		env := envName(f.Name)
		v := getenv(env)
		if given[f.Name] != "" || v == "" || err != nil {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = badValue(env, v, f, serr)
		}
		given[f.Name] = env
	})
	fs.VisitAll(func(f *flag.Flag) {
		if b, ok := flagBounds[f.Name]; ok && given[f.Name] != "" && err == nil {
			err = b.check(f, given[f.Name])
		}
	})
	if err != nil {
		return nil, err
	}
	if len(pos) != nargs {
		if nargs == 0 {
			return nil, usagef("unexpected argument %q", pos[0])
		}
		return nil, usagef("want %d argument(s), got %d; see '%s -h'", nargs, len(pos), fs.Name())
	}
	return pos, nil
}

// parseError turns an error of fs.Parse into one that writes the flag as
// the help does: "unknown flag --bogus", "--addr needs a value", or what
// badValue says of the value that a flag refused.
func parseError(fs *flag.FlagSet, err error, refused *refusedValue) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return usagef("unknown flag --%s", name)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return usagef("--%s needs a value", name)
	}
	if refused.err != nil {
		return badValue("--"+refused.name, refused.value, fs.Lookup(refused.name), refused.err)
	}
	return usagef("%s", msg)
}

// helpIndent and helpWidth lay out a flag's lines in -h.
const (
	helpIndent = "      "
	helpWidth  = 80
)

// printHelp prints what -h shows for the command fs parses: its usage
// line, what it does, and each flag as it is typed (--name and what it
// takes: the word in backquotes in its usage, as flag.UnquoteUsage reads
// it), what it does, then its default, its bounds (flagBounds) and its
// PETSTORE_ variable. A flag with an empty usage is accepted and not
// shown.
func printHelp(fs *flag.FlagSet, w io.Writer) {
	name := cmdName(fs)
	about := ""
	for _, c := range commands {
		if c.name == name {
			about = c.about
		}
	}
	fmt.Fprintf(w, "usage: %s\n\n%s\n", usageLine(name), about)
	heading := "\nflags:\n"
	fs.VisitAll(func(f *flag.Flag) {
		if f.Usage == "" {
			return
		}
		fmt.Fprint(w, heading)
		heading = ""
		plain := *f
		if c, ok := f.Value.(checkedValue); ok {
			plain.Value = c.Value
		}
		arg, usage := flag.UnquoteUsage(&plain)
		if arg != "" {
			arg = " " + arg
		}
		fmt.Fprintf(w, "  --%s%s\n", f.Name, arg)
		for _, line := range wrapWords(usage, helpWidth-len(helpIndent)) {
			fmt.Fprintf(w, "%s%s\n", helpIndent, line)
		}
		var facts []string
		if d := helpDefault(f); d != "" {
			facts = append(facts, "default "+d)
		}
		if b, ok := flagBounds[f.Name]; ok {
			facts = append(facts, b.text(f))
		}
		facts = append(facts, envName(f.Name))
		fmt.Fprintf(w, "%s(%s)\n", helpIndent, strings.Join(facts, "; "))
	})
}

// helpDefault is f's default as -h writes it: none for an empty, zero or
// false one, a duration as the docs write it, a text quoted.
func helpDefault(f *flag.Flag) string {
	d := f.DefValue
	if d == "" || d == "0" || d == "false" {
		return ""
	}
	if isDurationFlag(f) {
		if v, err := time.ParseDuration(d); err == nil {
			if v == 0 {
				return ""
			}
			return fmtDuration(v)
		}
	}
	if g, ok := f.Value.(flag.Getter); ok {
		if _, ok := g.Get().(string); ok {
			return strconv.Quote(d)
		}
	}
	return d
}

// wrapWords breaks s into lines of at most width bytes, between words (a
// longer word has a line of its own).
func wrapWords(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
