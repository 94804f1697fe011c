package profile

import (
	"fmt"
	"os"
	"strings"

	"github.com/softnic/softnic/device"
)

// DefaultName is the profile every command runs when none is named.
const DefaultName = "cx5-gen3x16"

// Default returns the default profile.
func Default() device.Spec { return device.DefaultSpec() }

// Load returns the profile called nameOrFile: the default for "", an
// embedded profile by name, or else a JSON file.
func Load(nameOrFile string) (device.Spec, error) {
	if nameOrFile == "" || nameOrFile == DefaultName {
		return Default(), nil
	}
	b, err := os.ReadFile(nameOrFile)
	if err != nil {
		if os.IsNotExist(err) && !strings.ContainsAny(nameOrFile, "/.") {
			return device.Spec{}, fmt.Errorf("profile %q: no such profile (have %s) and no such file", nameOrFile, strings.Join(Names(), ", "))
		}
		return device.Spec{}, fmt.Errorf("profile: %w", err)
	}
	return device.ParseSpec(b)
}

// Names lists the embedded profiles.
func Names() []string { return []string{DefaultName} }
