module github.com/softnic/softnic

go 1.26.8

require (
	github.com/stretchr/testify v1.12.1
	golang.org/x/sys v0.50.0
)

require (
	github.com/google/gopacket v1.1.19 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)
