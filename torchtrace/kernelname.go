package torchtrace

import (
	"regexp"
	"strings"
)

// kernelName is a kernel's name as CUPTI/roctracer demangle it, cut into the
// parts classification reads: the namespaces, the function's own
// identifier, and (for wrapper kernels such as cutlass::Kernel<Op>) the type
// it wraps. The parameter list and the template arguments are not read: a
// kernel's arguments say what it is handed, not what it does
// (split_embedding_codegen_forward_unweighted_kernel<…>(…fbgemm_gpu::…) is no
// GEMM, though its argument types name FBGEMM).
type kernelName struct {
	ns      []string // lower-cased, outermost first
	fn      string   // lower-cased identifier
	wrapped string   // lower-cased qualified name of the first template argument
}

// wrappers are kernel identifiers that only launch the type they are
// instantiated with: CUTLASS 2's cutlass::Kernel<Op> and cutlass::Kernel2,
// CUTLASS 3's cutlass::device_kernel<Op> (FlashAttention 3, vLLM's scaled_mm,
// machete, CUTLASS GEMMs all run as one), CK tile's
// ck_tile::kentry<MaxThreads, MinBlocks, Kernel> (ROCm/composable_kernel
// include/ck_tile/host/kernel_launch.hpp: FmhaFwdKernel, GemmKernel run
// as one). CK's older kernel templates are named after what they do.
var wrappers = map[string]bool{"kernel": true, "kernel2": true, "device_kernel": true, "kentry": true}

// parseKernelName cuts a demangled name such as
// "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<…>(…)".
// A name that is not C++ (a Triton kernel, a cuBLAS "ampere_sgemm_…", a
// Tensile "Cijk_…", a mangled "_ZN…") is its own identifier.
func parseKernelName(name string) kernelName {
	s := strings.ReplaceAll(strings.TrimSpace(name), "(anonymous namespace)::", "")
	s = stripTrailing(s, '(', ')')
	var targs string
	if strings.HasSuffix(s, ">") {
		if i := matching(s, '<', '>'); i > 0 {
			targs = s[i+1 : len(s)-1]
			s = s[:i]
		}
	}
	// The return type ("void") and qualifiers come before the name.
	if i := strings.LastIndexByte(s, ' '); i >= 0 {
		s = s[i+1:]
	}
	parts := strings.Split(strings.ToLower(s), "::")
	k := kernelName{ns: parts[:len(parts)-1], fn: parts[len(parts)-1]}
	if wrappers[k.fn] && targs != "" {
		k.wrapped = strings.ToLower(firstArg(targs))
	}
	return k
}

// stripTrailing drops a final bracketed group (the parameter list) when s
// ends with close.
func stripTrailing(s string, open, close byte) string {
	if !strings.HasSuffix(s, string(close)) {
		return s
	}
	if i := matching(s, open, close); i > 0 {
		return strings.TrimSpace(s[:i])
	}
	return s
}

// matching is the index of the open bracket matching s's last byte (close),
// or -1. Parentheses inside template arguments (a lambda's "(float)") and
// angle brackets inside a parameter list are nested, never mixed at one
// level, so counting the one kind suffices.
func matching(s string, open, close byte) int {
	depth := 0
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case close:
			depth++
		case open:
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// firstArg is the first top-level template argument that names a type,
// without its own template arguments: "flash::FlashAttnFwdSm90<…>, …" →
// "flash::FlashAttnFwdSm90"; "64, 2, ck_tile::FmhaFwdKernel<…>" →
// "ck_tile::FmhaFwdKernel" (numbers are launch bounds, not what runs).
func firstArg(targs string) string {
	for rest := targs; rest != ""; {
		arg, next := cutArg(rest)
		if arg != "" && strings.Trim(arg, "0123456789u") != "" {
			return arg
		}
		rest = next
	}
	return ""
}

// cutArg splits off the first top-level template argument (its name, without
// its own template arguments) and returns the rest after its comma.
func cutArg(targs string) (arg, rest string) {
	depth, end := 0, -1
	for i := 0; i < len(targs); i++ {
		switch targs[i] {
		case '<', '(':
			if depth == 0 && targs[i] == '<' && end < 0 {
				end = i
			}
			depth++
		case '>', ')':
			depth--
		case ',':
			if depth == 0 {
				if end < 0 {
					end = i
				}
				return strings.TrimSpace(targs[:end]), targs[i+1:]
			}
		}
	}
	if end < 0 {
		end = len(targs)
	}
	return strings.TrimSpace(targs[:end]), ""
}

// functorRE finds what a generic PyTorch kernel runs in its template
// arguments: at::native::elementwise_kernel<128, 4, gpu_kernel_impl_nocast<
// BinaryFunctor<…, MulFunctor<float>>>> runs MulFunctor;
// direct_copy_kernel_cuda, silu_kernel, pow_tensor_scalar_kernel_impl.
var functorRE = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*(?:Functor[A-Za-z0-9_]*|_kernel_cuda|_kernel_impl|_kernel|Kernel|Copy)\b`)

// shortName is a kernel's name cut for a summary line: its identifier
// without return type and parameters, and for a kernel that runs a functor
// or wrapped type, the innermost-named one ("elementwise_kernel<MulFunctor>",
// "kentry<FmhaBatchPrefillWithPagedKVCacheKernel>").
func shortName(name string) string {
	s := strings.ReplaceAll(strings.TrimSpace(name), "(anonymous namespace)::", "")
	s = stripTrailing(s, '(', ')')
	targs := ""
	if strings.HasSuffix(s, ">") {
		if i := matching(s, '<', '>'); i > 0 {
			targs, s = s[i+1:len(s)-1], s[:i]
		}
	}
	if i := strings.LastIndexByte(s, ' '); i >= 0 {
		s = s[i+1:]
	}
	if i := strings.LastIndex(s, "::"); i >= 0 {
		s = s[i+2:]
	}
	var last string
	for _, m := range functorRE.FindAllString(targs, -1) {
		if m != "gpu_kernel_impl" && !strings.HasSuffix(m, "OffsetCalculator") {
			if strings.Contains(m, "Functor") || last == "" {
				last = m
			}
		}
	}
	if last != "" {
		return s + "<" + last + ">"
	}
	return s
}
