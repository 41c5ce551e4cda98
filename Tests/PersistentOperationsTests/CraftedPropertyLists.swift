import Foundation

/// Hand-made binary property lists that crash Foundation's readers on Linux, or try to.
enum CraftedPropertyList {
    /// Assembles a bplist00 from raw objects, with 1-byte offsets unless told otherwise.
    static func assemble(
        objects: [[UInt8]], offsets: [UInt64]? = nil, offsetSize: UInt8 = 1, referenceSize: UInt8 = 1,
        objectCount: UInt64? = nil, topObject: UInt64 = 0
    ) -> Data {
        var bytes = Array("bplist00".utf8)
        var computed: [UInt64] = []
        for object in objects {
            computed.append(UInt64(bytes.count))
            bytes.append(contentsOf: object)
        }
        let tableOffset = UInt64(bytes.count)
        for offset in offsets ?? computed {
            bytes.append(contentsOf: bigEndian(offset, width: Int(offsetSize)))
        }
        bytes.append(contentsOf: [0, 0, 0, 0, 0, 0, offsetSize, referenceSize])
        bytes.append(contentsOf: bigEndian(objectCount ?? UInt64(objects.count), width: 8))
        bytes.append(contentsOf: bigEndian(topObject, width: 8))
        bytes.append(contentsOf: bigEndian(tableOffset, width: 8))
        return Data(bytes)
    }

    static func bigEndian(_ value: UInt64, width: Int) -> [UInt8] {
        (0..<width).reversed().map { UInt8(truncatingIfNeeded: value >> UInt64($0 * 8)) }
    }

    /// An array claiming 2^60 elements in a 52-byte file.
    static let hugeArrayCount = assemble(objects: [[0xAF, 0x13] + bigEndian(1 << 60, width: 8), [0x10, 0x01]])
    /// A dictionary claiming 2^60 entries.
    static let hugeDictionaryCount = assemble(objects: [[0xDF, 0x13] + bigEndian(1 << 60, width: 8), [0x10, 0x01]])
    /// An array containing itself.
    static let selfReference = assemble(objects: [[0xA1, 0x00]])
    /// Two dictionaries referring to each other.
    static let referenceCycle = assemble(objects: [[0xD1, 0x02, 0x01], [0xD1, 0x02, 0x00], [0x51, 0x6B]])
    /// An offset-table entry pointing past the object area.
    static let offsetOutOfBounds = assemble(objects: [[0xA1, 0x01], [0x10, 0x01]], offsets: [8, 0xF0])
    /// An array referring to object 5 of 2.
    static let referenceOutOfRange = assemble(objects: [[0xA1, 0x05], [0x10, 0x01]])
    /// A trailer claiming more objects than the file holds.
    static let objectCountTooLarge = assemble(objects: [[0xA1, 0x01], [0x10, 0x01]], objectCount: 1 << 40)
    /// A set (which makes `PropertyListSerialization` segfault).
    static let set = assemble(objects: [[0xC1, 0x01], [0x10, 0x01]])
    /// A UID, which only keyed archives use.
    static let uid = assemble(objects: [[0xA1, 0x01], [0x80, 0x01]])
    /// A dictionary whose key is an integer.
    static let integerKey = assemble(objects: [[0xD1, 0x01, 0x01], [0x10, 0x01]])
    /// A dictionary with the same key twice.
    static let duplicateKey = assemble(objects: [[0xD2, 0x01, 0x01, 0x02, 0x02], [0x51, 0x6B], [0x10, 0x01]])
    /// A data object claiming more bytes than remain.
    static let dataPastEnd = assemble(objects: [[0x4F, 0x12, 0x00, 0x10, 0x00, 0x00]])

    /// Arrays nested `depth` deep, ending in an integer.
    static func nested(depth: Int) -> Data {
        var objects: [[UInt8]] = []
        for index in 0..<depth {
            objects.append([0xA1] + bigEndian(UInt64(index + 1), width: 2))
        }
        objects.append([0x10, 0x01])
        var offsets: [UInt64] = []
        var position: UInt64 = 8
        for object in objects {
            offsets.append(position)
            position += UInt64(object.count)
        }
        return assemble(objects: objects, offsets: offsets, offsetSize: 4, referenceSize: 2)
    }

    /// Arrays that share their child twice per level: 2^levels values once expanded.
    static func exponentialSharing(levels: Int) -> Data {
        var objects: [[UInt8]] = []
        for index in 0..<levels {
            objects.append([0xA2, UInt8(index + 1), UInt8(index + 1)])
        }
        objects.append([0x10, 0x01])
        return assemble(objects: objects)
    }

    /// An XML property list with a 0xF8 byte inside `<integer>`, which traps the XML reader.
    static let xmlWithBadInteger: Data = {
        var bytes = Array("<?xml version=\"1.0\" encoding=\"UTF-8\"?><plist version=\"1.0\"><dict><key>a</key><integer>1".utf8)
        bytes.append(0xF8)
        bytes.append(contentsOf: Array("</integer></dict></plist>".utf8))
        return Data(bytes)
    }()

    /// Every crafted body with a name, for tables. Made once: the deep and the shared ones take
    /// a while to build, and the fuzzers pick from the table thousands of times.
    static let all: [(name: String, body: Data)] = [
        ("huge array count", hugeArrayCount),
        ("huge dictionary count", hugeDictionaryCount),
        ("self reference", selfReference),
        ("reference cycle", referenceCycle),
        ("offset out of bounds", offsetOutOfBounds),
        ("reference out of range", referenceOutOfRange),
        ("object count too large", objectCountTooLarge),
        ("set marker", set),
        ("uid marker", uid),
        ("integer key", integerKey),
        ("duplicate key", duplicateKey),
        ("data past end", dataPastEnd),
        ("nesting 20,000 deep", nested(depth: 20_000)),
        ("exponential sharing", exponentialSharing(levels: 60)),
        ("XML with 0xF8 in integer", xmlWithBadInteger),
    ]
}
