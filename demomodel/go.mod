module github.com/blockdiff/blockdiff/demomodel

go 1.27.3
