// Package profile holds softnic's device profiles as data: one embedded
// JSON file per profile, every number citing its source in
// ../shared/reference/timing.md, loaded by name or from a file and
// validated field by field.
package profile
