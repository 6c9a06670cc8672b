package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/blockdiff/blockdiff/model"
)

// envVariant is one of -env's variants: settings over the environment the bench started
// in, and the starting values of the names any variant sets, so that those it does not
// set are restored.
type envVariant struct {
	settings [][2]string        // NAME, VALUE
	original map[string]*string // every variant's names: their values when the bench started (nil: unset)
}

// parseEnv parses -env: variants separated by ";", each of NAME=VALUE settings separated
// by spaces. An empty flag is one variant, the environment as it is.
func parseEnv(flag string) ([]envVariant, error) {
	var variants []envVariant
	original := map[string]*string{}
	for part := range strings.SplitSeq(flag, ";") {
		var v envVariant
		for setting := range strings.FieldsSeq(part) {
			name, value, ok := strings.Cut(setting, "=")
			if !ok || name == "" {
				return nil, fmt.Errorf("-env: %q is not NAME=VALUE", setting)
			}
			v.settings = append(v.settings, [2]string{name, value})
			original[name] = nil
		}
		variants = append(variants, v)
	}
	for name := range original {
		if value, ok := os.LookupEnv(name); ok {
			original[name] = &value
		}
	}
	for i := range variants {
		variants[i].original = original
	}
	return variants, nil
}

// apply sets the variant's settings and restores the bench's starting value of every
// other name that a variant sets.
func (v envVariant) apply() {
	for name, value := range v.original {
		if value != nil {
			os.Setenv(name, *value)
		} else {
			os.Unsetenv(name)
		}
	}
	for _, s := range v.settings {
		os.Setenv(s[0], s[1])
	}
}

// String writes the variant as -env has it, "as started" for none.
func (v envVariant) String() string {
	if len(v.settings) == 0 {
		return "as started"
	}
	parts := make([]string, len(v.settings))
	for i, s := range v.settings {
		parts[i] = s[0] + "=" + s[1]
	}
	return strings.Join(parts, " ")
}

// dropPrograms makes m recompile every program on its next use: setting a linear layer
// to itself drops the programs compiled before (model.NamedLinear.Set), so that a
// setting the backend reads when it compiles takes effect.
func dropPrograms(m *model.Model) {
	linears := m.Linears()
	head := linears[len(linears)-1]
	head.Set(head.Linear)
}
