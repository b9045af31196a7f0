// limits_plans.go owns the plan table: the limits each plan gives a key, and how
// a stored key's limits are resolved from it.

package main

// plan is a named pair of limits; enterprise keys carry their own.
type plan struct {
	Name string
	RPM  int64 // requests per minute: the token bucket's capacity
	RPD  int64 // requests per UTC day
}

// plans is the plan table; enterprise has no fixed limits.
var plans = []plan{
	{Name: "free", RPM: 60, RPD: 1000},
	{Name: "pro", RPM: 300, RPD: 10000},
	{Name: "business", RPM: 1000, RPD: 100000},
	{Name: "enterprise"},
}

// planByName returns the plan called name.
func planByName(name string) (plan, bool) {
	for _, p := range plans {
		if p.Name == name {
			return p, true
		}
	}
	return plan{}, false
}

// planNames returns the names of the plans, in the table's order.
func planNames() []string {
	names := make([]string, len(plans))
	for i, p := range plans {
		names[i] = p.Name
	}
	return names
}

// planLimits returns the per-minute and per-day limits of a key of the
// named plan: the plan's own, or for enterprise (and an unknown plan) the
// key's stored rpm and rpd.
func planLimits(name string, rpm, rpd int64) (int64, int64) {
	if p, ok := planByName(name); ok && name != "enterprise" {
		return p.RPM, p.RPD
	}
	return rpm, rpd
}
