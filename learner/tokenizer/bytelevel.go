package tokenizer

// The byte-level alphabet of GPT-2, used by every byte-level BPE vocabulary:
// each of the 256 byte values is written as one printable character so that
// vocabulary entries are valid text. Printable Latin-1 bytes stand for
// themselves; the others (controls, space, DEL, NBSP, soft hyphen) are
// shifted to U+0100 and up, in byte order.
var (
	byteToRune [256]rune
	runeToByte = map[rune]byte{}
)

func init() {
	next := rune(256)
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = next
			next++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevelEncode writes raw bytes in the byte-level alphabet.
func byteLevelEncode(b []byte) string {
	r := make([]rune, len(b))
	for i, c := range b {
		r[i] = byteToRune[c]
	}
	return string(r)
}

// byteLevelDecode maps a vocabulary string back to the bytes it stands for.
// As in Hugging Face's ByteLevel decoder, a token holding a character outside
// the alphabet (an added token such as "<|im_start|>" written with a space,
// say) is taken as its own UTF-8 bytes.
func byteLevelDecode(s string) []byte {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		b, ok := runeToByte[r]
		if !ok {
			return []byte(s)
		}
		out = append(out, b)
	}
	return out
}
