// Package pluginargs decodes the args of our scheduler plugins. The
// scheduler decodes a pluginConfig entry by the kind <Name>Args, which no
// scheme registers for our plugins, so their args arrive as the raw YAML or
// JSON of the configuration file (runtime.Unknown).
package pluginargs

import (
	"errors"
	"fmt"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// DecodeStrict decodes YAML or JSON args into into, refusing fields into
// does not have and keys given twice: a misspelt field would otherwise be
// a silent default, and of two values for one key the last would win
// (kube-scheduler's own decoder refuses both in the rest of the file).
func DecodeStrict(data []byte, into any) error {
	data, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return err
	}
	strictErrs, err := kjson.UnmarshalStrict(data, into, kjson.DisallowUnknownFields, kjson.DisallowDuplicateFields)
	if err != nil {
		return err
	}
	if len(strictErrs) > 0 {
		return fmt.Errorf("strict decoding: %w", errors.Join(strictErrs...))
	}
	return nil
}
