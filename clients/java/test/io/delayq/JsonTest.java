package io.delayq;

import java.math.BigInteger;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** The JSON reader and writer on their own. */
public class JsonTest {
    public void testValuesRoundTrip() {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("s", "caf\u00e9 \"q\" \\ \n\t\u0001");
        m.put("n", 42L);
        m.put("d", 1.5);
        m.put("b", true);
        m.put("z", null);
        m.put("l", List.of(1L, "two", List.of()));
        m.put("o", Map.of());
        String text = Json.write(m);
        Check.equal("{\"s\":\"caf\u00e9 \\\"q\\\" \\\\ \\n\\t\\u0001\",\"n\":42,\"d\":1.5,\"b\":true,\"z\":null,"
                + "\"l\":[1,\"two\",[]],\"o\":{}}", text);
        Check.equal(m, Json.parse(text));
    }

    public void testNumbers() {
        Check.equal(30L, Json.parse("30"));
        Check.equal(new BigInteger("12345678901234567890123"), Json.parse("12345678901234567890123"));
        Check.equal(-0.25, Json.parse("-0.25"));
        Check.equal(100.0, Json.parse("1e2"));
        Check.equal("30", Json.write(30.0));   // whole seconds written as integers
        Check.equal("0.001", Json.write(0.001));
        Check.fails(IllegalArgumentException.class, () -> Json.write(Double.NaN));
    }

    public void testRawKeepsEveryDigitAndEscape() {
        String text = "{\"value\" : {\"n\":12345678901234567890123,\"s\":\"caf\\u00e9\",\"f\":1.0e+2}, \"x\":1}";
        Json.JsonObject o = (Json.JsonObject) Json.parse(text);
        Check.equal("{\"n\":12345678901234567890123,\"s\":\"caf\\u00e9\",\"f\":1.0e+2}", o.raw("value"));
        Check.equal("1", o.raw("x"));
        Check.equal("{\"a\":[1,2]}", Json.write(Json.raw(" {\"a\":[1,2]} ")));
    }

    public void testStrictness() {
        for (String bad : Arrays.asList("", "{", "{\"a\":1,}", "[1 2]", "{'a':1}", "NaN", "01", "1.", "\"\\x\"",
                "{\"a\":1,\"a\":2}", "tru", "\"a\u0001\"", "1 2", "-")) {
            Check.fails(Json.ParseException.class, () -> Json.parse(bad));
        }
        Check.fails(Json.ParseException.class, () -> Json.raw("{nope}"));
    }

    public void testSurrogates() {
        Check.equal("\"\ud83d\ude00\"", Json.write("\ud83d\ude00"));   // a pair stays as it is
        Check.equal("\"\\ud800x\"", Json.write("\ud800x"));          // a lone one is escaped
        Check.equal("\ud83d\ude00", Json.parse("\"\\ud83d\\ude00\""));
    }
}
