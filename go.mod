module github.com/softnic/softnic

go 1.26.8

require (
	github.com/stretchr/testify v1.12.1
	golang.org/x/sys v0.0.0-20190412213103-97732733099d
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect
