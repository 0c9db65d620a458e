package main

import (
	"reflect"
	"testing"
)

func TestResourceAttributesFromEnv(t *testing.T) {
	got := resourceAttributes(" service.instance.id=10.0.0.7%3A8000, k8s.pod.name=vllm-0 ,broken,=x")
	want := map[string]string{"service.instance.id": "10.0.0.7:8000", "k8s.pod.name": "vllm-0"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if len(resourceAttributes("")) != 0 {
		t.Fatal("empty env gave attributes")
	}
}
