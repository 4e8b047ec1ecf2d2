package main

import (
	"bytes"
	"debug/macho"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
)

// lipo writes a universal ("fat") Mach-O of thin ones, as Apple's lipo
// -create does, on any OS: a big-endian header naming each slice's CPU
// type, offset, size and alignment, then the slices, each at a 16 KiB
// boundary (Apple silicon's page size). Each slice keeps its own code
// signature (the Go linker signs darwin/arm64 ad hoc), which covers the
// slice alone, so the universal file runs on both Macs.
//
//	releasemeta lipo -out FILE THIN...

const fatAlign = 14 // 2^14

// lipo is the universal binary of thins.
func lipo(thins ...[]byte) ([]byte, error) {
	if len(thins) < 2 {
		return nil, fmt.Errorf("lipo: want two thin binaries or more")
	}
	type arch struct{ cpu, sub uint32 }
	var archs []arch
	for i, b := range thins {
		f, err := macho.NewFile(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("lipo: binary %d: %w", i+1, err)
		}
		if f.Magic != macho.Magic64 {
			return nil, fmt.Errorf("lipo: binary %d is not a 64-bit Mach-O", i+1)
		}
		a := arch{uint32(f.Cpu), f.SubCpu}
		for _, o := range archs {
			if o.cpu == a.cpu {
				return nil, fmt.Errorf("lipo: two binaries for %v", f.Cpu)
			}
		}
		archs = append(archs, a)
	}
	var out bytes.Buffer
	put := func(v uint32) { binary.Write(&out, binary.BigEndian, v) }
	put(macho.MagicFat)
	put(uint32(len(thins)))
	offset := uint32(8 + 20*len(thins))
	align := func(n uint32) uint32 { return (n + 1<<fatAlign - 1) &^ (1<<fatAlign - 1) }
	for i, b := range thins {
		offset = align(offset)
		put(archs[i].cpu)
		put(archs[i].sub)
		put(offset)
		put(uint32(len(b)))
		put(fatAlign)
		offset += uint32(len(b))
	}
	for _, b := range thins {
		out.Write(make([]byte, int(align(uint32(out.Len())))-out.Len()))
		out.Write(b)
	}
	return out.Bytes(), nil
}

func lipoCmd(args []string) error {
	fs := flag.NewFlagSet("lipo", flag.ContinueOnError)
	out := fs.String("out", "", "the universal binary to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("lipo: -out is required")
	}
	var thins [][]byte
	for _, name := range fs.Args() {
		b, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		thins = append(thins, b)
	}
	fat, err := lipo(thins...)
	if err != nil {
		return err
	}
	return os.WriteFile(*out, fat, 0o755)
}
