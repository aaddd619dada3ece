// Command mcs-api-crds prints the ServiceExport and ServiceImport
// CustomResourceDefinitions of the pinned sigs.k8s.io/mcs-api release, as
// one multi-document YAML stream for `kubectl apply -f -`.
package main

import (
	"os"

	"sigs.k8s.io/mcs-api/config/crd"
)

func main() {
	for _, doc := range [][]byte{crd.ServiceExportCRD, crd.ServiceImportCRD} {
		os.Stdout.WriteString("---\n")
		os.Stdout.Write(doc)
	}
}
